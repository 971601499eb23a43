package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weirstream/weir"
)

// describeReport is what `weir describe` shows; its JSON is the -o json
// output (durations in milliseconds).
type describeReport struct {
	Application string `json:"application"`
	// Descriptor reports whether the topology topic held a descriptor;
	// without one, input partitions are those the group committed.
	Descriptor bool           `json:"descriptor"`
	Group      groupReport    `json:"group"`
	Partitions []partitionRow `json:"partitions"`
	Stores     []storeRow     `json:"stores"`
	At         time.Time      `json:"at"`
}

type groupReport struct {
	State    string      `json:"state"`
	Protocol string      `json:"protocol"`
	Members  []memberRow `json:"members"`
}

type memberRow struct {
	MemberID   string `json:"member_id"`
	InstanceID string `json:"instance_id,omitempty"` // static membership
	ClientID   string `json:"client_id"`
	Host       string `json:"host"`
	// Assigned are the member's input partitions ("topic/partition").
	Assigned []string `json:"assigned"`
	// Tasks are the weir tasks they make ("<sub-topology>_<partition>"),
	// known from the topology descriptor.
	Tasks []string `json:"tasks,omitempty"`
}

type partitionRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	End       int64  `json:"end_offset"`
	Committed int64  `json:"committed_offset"` // -1: none
	Lag       int64  `json:"lag"`
	// OldestUnread is the timestamp of the record at the committed
	// offset (zero when nothing is unread); AgeMs is how old it is by
	// this machine's clock, 0 when its timestamp is ahead of that clock.
	OldestUnread time.Time `json:"oldest_unread,omitzero"`
	AgeMs        int64     `json:"oldest_unread_age_ms"`
	// RetentionMs is the topic's retention.ms (-1: forever); HeadroomMs
	// how long until the oldest unread record may be deleted (-1: never).
	RetentionMs int64 `json:"retention_ms"`
	HeadroomMs  int64 `json:"headroom_ms"`
}

type storeRow struct {
	Store      string `json:"store"`
	Type       string `json:"type"`
	Changelog  string `json:"changelog"`
	Partitions int    `json:"partitions"`
	// End is the changelog's end offsets summed; Records the records
	// between log start and end; Bytes its size on disk (-1 unknown).
	End     int64 `json:"end_offset"`
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes"`
}

func describeCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	var c common
	fs := newFlags("describe", "-app ID [-o table|json]", errOut, &c)
	c.outputFlag(fs)
	if err := parse(fs, args, &c); err != nil {
		return err
	}
	cl, err := connect(c)
	if err != nil {
		return err
	}
	defer cl.close()
	r, err := describeApp(cl, c.app, time.Now())
	if err != nil {
		return err
	}
	if c.format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return writeDescribeTable(out, r)
}

// describeApp gathers the report of application app as of now.
func describeApp(cl *cluster, app string, now time.Time) (*describeReport, error) {
	r := &describeReport{Application: app, At: now}
	g, err := cl.group(app)
	if err != nil {
		return nil, err
	}
	r.Group = groupReport{State: g.State, Protocol: g.Protocol}
	for _, m := range g.Members {
		row := memberRow{MemberID: m.MemberId, ClientID: m.ClientId, Host: m.ClientHost}
		if m.GroupInstanceId != nil {
			row.InstanceID = *m.GroupInstanceId
		}
		if a, err := m.GetMemberAssignment(); err == nil && a != nil {
			for topic, ps := range a.Topics {
				for _, p := range ps {
					row.Assigned = append(row.Assigned, fmt.Sprintf("%s/%d", topic, p))
				}
			}
			slices.Sort(row.Assigned)
		}
		r.Group.Members = append(r.Group.Members, row)
	}
	slices.SortFunc(r.Group.Members, func(a, b memberRow) int { return strings.Compare(a.MemberID, b.MemberID) })

	committed, err := cl.committed(app)
	if err != nil {
		return nil, err
	}
	d, err := readDescriptor(cl, app)
	if err != nil {
		return nil, err
	}
	var inputs []string
	if d != nil {
		r.Descriptor = true
		readers := map[string]int{}
		for _, t := range append(slices.Clone(d.Sources), d.InternalTopics...) {
			if t.Subtopology != nil {
				readers[t.Topic] = *t.Subtopology
			}
		}
		for i := range r.Group.Members {
			r.Group.Members[i].Tasks = tasksOf(r.Group.Members[i].Assigned, readers)
		}
		for _, s := range d.Sources {
			inputs = append(inputs, s.Topic)
		}
		for _, t := range d.InternalTopics {
			if t.Kind == "repartition" {
				inputs = append(inputs, t.Topic)
			}
		}
	} else {
		for topic := range committed {
			inputs = append(inputs, topic)
		}
	}
	slices.Sort(inputs)
	inputs = slices.Compact(inputs)
	for _, topic := range inputs {
		rows, err := inputRows(cl, topic, committed[topic], now)
		if err != nil {
			return nil, err
		}
		r.Partitions = append(r.Partitions, rows...)
	}
	if d != nil {
		for _, s := range d.Stores {
			row, err := storeInfo(cl, s)
			if err != nil {
				return nil, err
			}
			r.Stores = append(r.Stores, row)
		}
	}
	return r, nil
}

// tasksOf returns the tasks of assigned partitions ("topic/partition"),
// given the sub-topology that reads each topic; sorted, each once.
func tasksOf(assigned []string, readers map[string]int) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range assigned {
		i := strings.LastIndexByte(a, '/')
		if i < 0 {
			continue
		}
		sub, ok := readers[a[:i]]
		if !ok {
			continue
		}
		task := fmt.Sprintf("%d_%s", sub, a[i+1:])
		if !seen[task] {
			seen[task] = true
			out = append(out, task)
		}
	}
	slices.Sort(out)
	return out
}

// inputRows describes every partition of an input topic.
func inputRows(cl *cluster, topic string, committed map[int32]int64, now time.Time) ([]partitionRow, error) {
	ps, err := cl.partitions(topic)
	if err != nil {
		return nil, err
	}
	retention, err := cl.retention(topic)
	if err != nil {
		return nil, err
	}
	var rows []partitionRow
	for _, p := range ps {
		start, end, err := cl.offsets(topic, p)
		if err != nil {
			return nil, err
		}
		row := partitionRow{Topic: topic, Partition: p, End: end, Committed: -1, RetentionMs: -1, HeadroomMs: -1}
		if off, ok := committed[p]; ok && off >= 0 {
			row.Committed = off
		}
		from := max(row.Committed, start) // nothing committed: from the log start
		row.Lag = end - from
		if retention >= 0 {
			row.RetentionMs = retention.Milliseconds()
		}
		if ts, ok, err := cl.recordAt(topic, p, from, end); err != nil {
			return nil, err
		} else if ok {
			row.OldestUnread = ts
			// A timestamp ahead of this machine's clock (a producer's
			// clock, or this one, off) is unread for 0 ms, not a
			// negative age that reads as "forever".
			row.AgeMs = max(0, now.Sub(ts).Milliseconds())
			if retention >= 0 {
				row.HeadroomMs = max(0, retention.Milliseconds()-row.AgeMs)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// storeInfo describes a store's changelog.
func storeInfo(cl *cluster, s weir.StoreDescriptor) (storeRow, error) {
	row := storeRow{Store: s.Name, Type: s.Type, Changelog: s.Changelog, Bytes: -1}
	ps, err := cl.partitions(s.Changelog)
	if err != nil {
		return row, err
	}
	row.Partitions = len(ps)
	for _, p := range ps {
		start, end, err := cl.offsets(s.Changelog, p)
		if err != nil {
			return row, err
		}
		row.End += end
		row.Records += end - start
	}
	row.Bytes = cl.topicBytes(s.Changelog)
	return row, nil
}

// writeDescribeTable renders r as tables.
func writeDescribeTable(w io.Writer, r *describeReport) error {
	fmt.Fprintf(w, "application %s, group %s (%s), %d member(s)\n", r.Application, r.Group.State, orDash(r.Group.Protocol), len(r.Group.Members))
	if !r.Descriptor {
		fmt.Fprintln(w, "(no topology descriptor: input partitions are those the group committed)")
	}
	if len(r.Group.Members) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "MEMBER\tINSTANCE\tCLIENT\tHOST\tTASKS\tASSIGNED")
		for _, m := range r.Group.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.MemberID, orDash(m.InstanceID), m.ClientID, m.Host, orDash(strings.Join(m.Tasks, " ")), strings.Join(m.Assigned, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tEND\tCOMMITTED\tLAG\tOLDEST UNREAD\tAGE\tRETENTION\tHEADROOM")
	for _, p := range r.Partitions {
		committed, oldest, age, headroom := "-", "-", "-", "-"
		if p.Committed >= 0 {
			committed = fmt.Sprint(p.Committed)
		}
		if !p.OldestUnread.IsZero() {
			oldest = p.OldestUnread.UTC().Format(time.RFC3339)
			age, headroom = ms(p.AgeMs), ms(p.HeadroomMs)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, p.End, committed, p.Lag, oldest, age, ms(p.RetentionMs), headroom)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Stores) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STORE\tTYPE\tCHANGELOG\tPARTITIONS\tEND\tRECORDS\tBYTES")
		for _, s := range r.Stores {
			bytes := "-"
			if s.Bytes >= 0 {
				bytes = fmt.Sprint(s.Bytes)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.Store, s.Type, s.Changelog, s.Partitions, s.End, s.Records, bytes)
		}
		return tw.Flush()
	}
	return nil
}

// ms renders milliseconds as a rounded duration, "forever" for -1.
func ms(v int64) string {
	if v < 0 {
		return "forever"
	}
	d := time.Duration(v) * time.Millisecond
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
