// Command weir operates weir applications from outside: it reads an
// application's consumer group, topics and topology descriptor from the
// cluster, and changes them only when the application is stopped.
//
//	weir describe      -app ID [-o table|json]
//	weir check-upgrade -app ID -describe new.json
//	weir reset         -app ID (-to-earliest | -to-datetime T | -shift-by N) [-dry-run]
//	weir fork          -from ID -to ID2 [-dry-run]
//	weir inspect       -app ID -store S [-key K] [-limit N]
//	weir rescale       -from ID -to ID2 -partitions N [-check] [-dry-run]
//	weir rename-store  -app ID -from STORE -to STORE2 [-dry-run]
//
// Every command takes -brokers (default $WEIR_BOOTSTRAP_SERVERS, else
// localhost:9092), the connection's security (-tls, -tls-ca, -tls-cert,
// -tls-key, -sasl-mechanism, -sasl-user; the SASL password from
// $WEIR_SASL_PASSWORD, never a flag) and -h. The commands that read or
// copy schemas (inspect, check-upgrade, fork, rescale, rename-store) take -registry (default
// $WEIR_SCHEMA_REGISTRY_URL), -registry-user (default
// $WEIR_SCHEMA_REGISTRY_USER), -registry-ca and -registry-password-file; the
// password otherwise comes from $WEIR_SCHEMA_REGISTRY_PASSWORD, never a flag
// or the URL, and goes to an http:// registry only with
// -registry-allow-http-auth. Exit codes: 0 done; 1 refused or differences
// found (nothing was changed); 2 bad usage; 3 the cluster could not be
// reached or answered with an error.
//
// Install with go install github.com/weirstream/weir/cmd/weir@latest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/weirstream/weir"
)

// Exit codes.
const (
	exitOK      = 0
	exitRefused = 1
	exitUsage   = 2
	exitCluster = 3
)

// refusal is an error that exits with exitRefused: the command looked and
// declined (or found differences), changing nothing.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refused(format string, args ...any) error { return &refusal{fmt.Sprintf(format, args...)} }

// usageError exits with exitUsage.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// commands maps each command to its function and a line of help.
var commands = []struct {
	name, help string
	run        func(ctx context.Context, args []string, out, errOut io.Writer) error
}{
	{"describe", "the application's group, members, tasks, input lag and oldest unread record, and stores", describeCmd},
	{"check-upgrade", "compare a new topology descriptor (an example's -describe output) with the application's", checkUpgradeCmd},
	{"reset", "rewind the application's input for a replay; its internal topics and local state go", resetCmd},
	{"fork", "copy a stopped application's state and offsets to a new application id (a savepoint)", forkCmd},
	{"inspect", "show a store's current contents, read from its changelog", inspectCmd},
	{"rescale", "move a stopped application's state to a new partition count, under a new application id", rescaleCmd},
	{"rename-store", "give a stopped application's store a new name and keep its state", renameStoreCmd},
}

const exitCodes = `Exit codes: 0 done; 1 refused or differences found (nothing changed);
2 bad usage; 3 the cluster could not be reached or answered with an error.`

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: weir <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.help)
	}
	fmt.Fprintln(w, "\n'weir <command> -h' lists a command's flags.\n"+exitCodes)
}

// run runs one command and returns the exit code.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(errOut)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], out, errOut)
		var r *refusal
		var u *usageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.As(err, &u):
			fmt.Fprintf(errOut, "weir %s: %v\n", c.name, err)
			return exitUsage
		case errors.As(err, &r):
			fmt.Fprintf(errOut, "weir %s: refused: %v\n", c.name, err)
			return exitRefused
		default:
			fmt.Fprintf(errOut, "weir %s: %v\n", c.name, err)
			return exitCluster
		}
	}
	fmt.Fprintf(errOut, "weir: unknown command %q\n", args[0])
	usage(errOut)
	return exitUsage
}

// common are the flags every command takes.
type common struct {
	brokers string
	app     string
	appFlag string // the flag that names the application: "app" or "from"
	// Security, as weir.Config.Security: TLS files and SASL; the password
	// comes from $WEIR_SASL_PASSWORD, never from a flag.
	tls                       bool
	caFile, certFile, keyFile string
	mechanism, user           string
	// format is the -o flag of the commands that print a report (see
	// outputFlag); "" when the command has none.
	format string
}

// outputFlag registers -o (table or json), which parse checks.
func (c *common) outputFlag(fs *flag.FlagSet) {
	fs.StringVar(&c.format, "o", "table", "output: table or json")
}

// newFlags returns a command's flag set with the common flags; its usage
// names the command's synopsis and the exit codes.
func newFlags(name, synopsis string, errOut io.Writer, c *common) *flag.FlagSet {
	return newFlagsApp(name, synopsis, "app", "the application id (required)", errOut, c)
}

// newFlagsApp is newFlags with the application's flag named appFlag.
func newFlagsApp(name, synopsis, appFlag, appUsage string, errOut io.Writer, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	def := os.Getenv("WEIR_BOOTSTRAP_SERVERS")
	if def == "" {
		def = "localhost:9092"
	}
	fs.StringVar(&c.brokers, "brokers", def, "comma-separated bootstrap servers (default $WEIR_BOOTSTRAP_SERVERS, else localhost:9092)")
	c.appFlag = appFlag
	fs.StringVar(&c.app, appFlag, "", appUsage)
	fs.BoolVar(&c.tls, "tls", false, "connect with TLS (implied by -tls-ca, -tls-cert)")
	fs.StringVar(&c.caFile, "tls-ca", "", "PEM file of the CAs that sign the brokers' certificates (default: the system's)")
	fs.StringVar(&c.certFile, "tls-cert", "", "PEM file of a client certificate, for brokers that require one (with -tls-key)")
	fs.StringVar(&c.keyFile, "tls-key", "", "PEM file of the client certificate's key")
	fs.StringVar(&c.mechanism, "sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (the password is read from $WEIR_SASL_PASSWORD)")
	fs.StringVar(&c.user, "sasl-user", "", "SASL user")
	fs.Usage = func() {
		fmt.Fprintf(errOut, "usage: weir %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
		fmt.Fprintln(errOut, "\n"+exitCodes)
	}
	return fs
}

// parse parses args and checks the common flags.
func parse(fs *flag.FlagSet, args []string, c *common) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	if c.app == "" {
		return &usageError{"-" + c.appFlag + " is required"}
	}
	if strings.TrimSpace(c.brokers) == "" {
		return &usageError{"-brokers is empty"}
	}
	if c.format != "" && c.format != "table" && c.format != "json" {
		return &usageError{fmt.Sprintf("-o %q: want table or json", c.format)}
	}
	if _, err := c.security(); err != nil {
		return &usageError{err.Error()}
	}
	return nil
}

// security returns the connection's security as weir configures it, its
// TLS files loaded.
func (c *common) security() (*weir.Security, error) {
	s := &weir.Security{SASL: weir.SASL{Mechanism: weir.SASLMechanism(c.mechanism), User: c.user, Password: os.Getenv("WEIR_SASL_PASSWORD")}}
	if c.tls || c.caFile != "" || c.certFile != "" || c.keyFile != "" {
		s.TLS = &weir.TLS{CAFile: c.caFile, CertFile: c.certFile, KeyFile: c.keyFile}
	}
	cfg := weir.Config{ApplicationID: "weir-cli", Brokers: []string{"localhost:9092"}, Security: *s} // only Security is checked
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}
