// Package hostport checks the addresses instances advertise for queries
// of their stores (Config.AdvertisedAddr). They travel through the
// consumer group (every member's subscription, passed on by the group
// leader) and end up in the URLs of forwarded lookups, so a member could
// otherwise make the others send requests wherever it likes: every
// address is checked where it is configured, where a subscription or an
// assignment is decoded, and again right before a URL is built from it.
package hostport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// maxLen bounds an address: a DNS name of 253 bytes, a colon and a port.
const maxLen = 253 + 6

// Check returns nil when s is a plain "host:port": host a DNS name
// (letters, digits and hyphens in dot-separated labels of 1 to 63 bytes,
// no hyphen at either end of a label, 253 bytes in all) or an IP address
// (IPv6 in brackets), port a decimal number from 1 to 65535. Anything else
// (a scheme, a path, a query, user information, spaces, a zone) is an
// error naming what is wrong, without quoting s beyond its length.
func Check(s string) error {
	if len(s) > maxLen {
		return fmt.Errorf("an address of %d bytes is longer than host:port can be", len(s))
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("not host:port")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || port[0] == '0' || port[0] == '+' {
		return errors.New("the port is not a number from 1 to 65535")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return errors.New("an IPv6 zone is not allowed")
		}
		if ip.Is6() && !ip.Is4In6() && s[0] != '[' {
			return errors.New("an IPv6 address needs brackets")
		}
		return nil
	}
	return checkName(host)
}

func checkName(host string) error {
	if host == "" || len(host) > 253 {
		return errors.New("the host is empty or longer than 253 bytes")
	}
	label := 0
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case c == '.':
			if label == 0 || host[i-1] == '-' {
				return errors.New("the host has an empty label or one ending in a hyphen")
			}
			label = 0
			continue
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-':
			if label == 0 {
				return errors.New("the host has a label starting with a hyphen")
			}
		default:
			return fmt.Errorf("the host has a byte 0x%02x that no DNS name has", c)
		}
		label++
		if label > 63 {
			return errors.New("the host has a label longer than 63 bytes")
		}
	}
	if host[len(host)-1] == '-' {
		return errors.New("the host has a label ending in a hyphen")
	}
	return nil
}
