package weir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statedir"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/topics"
)

// UpgradeError is returned by Run when the topology differs from the one
// the application last ran with in a way that would lose or misread
// state, and Config.AllowDropState does not name the store. Nothing was
// changed: not the topics, not the offsets, not the local state.
type UpgradeError struct {
	// Differences lists every difference found, refused or not.
	Differences []Difference
}

func (e *UpgradeError) Error() string {
	var refused []string
	for _, d := range e.Differences {
		if d.Refused {
			refused = append(refused, d.String())
		}
	}
	return "weir: the topology changed in ways that would lose or misread state (start refused; Config.AllowDropState names stores whose state may be dropped): " + strings.Join(refused, "; ")
}

// readDescriptor returns the descriptor app last ran with, nil when none
// was written.
func readDescriptor(client sarama.Client, admin sarama.ClusterAdmin, app string) (*Descriptor, error) {
	data, err := topics.ReadDescriptor(client, admin, app)
	if err != nil {
		return nil, fmt.Errorf("weir: %w", err)
	}
	if data == nil {
		return nil, nil
	}
	return ParseDescriptor(data)
}

// checkUpgrade compares the topology with the one the application last
// ran with, before Prepare creates or checks any topic: a refused
// difference stops the start unless Config.AllowDropState names its
// store, whose changelog topic and local state are then deleted so that
// it starts empty. It returns the descriptor found (nil on a first start).
func (a *App) checkUpgrade(client sarama.Client, admin sarama.ClusterAdmin, db *statelog.DB, dir string) (*Descriptor, error) {
	old, err := readDescriptor(client, admin, a.cfg.ApplicationID)
	if err != nil || old == nil {
		return old, err
	}
	if err := a.followReset(db, dir, old.ResetEpoch); err != nil {
		return nil, err
	}
	// Without the layout the comparison is right about what it refuses;
	// the differences it only reports are logged by recordUpgrade, which
	// knows partition counts and which stores follow their input topic.
	diffs := CompareDescriptors(old, describe(&a.cfg, a.graph, nil))
	if err := a.settle(diffs, false, func(store string) error {
		for _, s := range old.Stores {
			if s.Name == store && s.Changelog == graph.ChangelogTopic(a.cfg.ApplicationID, store) {
				if err := admin.DeleteTopic(s.Changelog); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
					return fmt.Errorf("weir: deleting %s of store %q: %w", s.Changelog, store, err)
				}
				if err := waitTopicGone(client, s.Changelog); err != nil {
					return err
				}
			}
		}
		return db.DropStore(store)
	}); err != nil {
		return nil, err
	}
	return old, nil
}

// recordUpgrade checks what only the layout knows (partition counts)
// against old, then writes the current descriptor when it differs.
func (a *App) recordUpgrade(admin sarama.ClusterAdmin, base *sarama.Config, db *statelog.DB, old *Descriptor, lay *topics.Layout) error {
	cur := describe(&a.cfg, a.graph, lay)
	if old != nil {
		cur.ResetEpoch = old.ResetEpoch
		var diffs []Difference
		for _, d := range CompareDescriptors(old, cur) {
			// checkUpgrade settled the other refusals already.
			if !d.Refused || d.Store != "" && strings.Contains(d.What, "partitions") {
				diffs = append(diffs, d)
			}
		}
		if err := a.settle(diffs, true, db.DropStore); err != nil {
			return err
		}
		if old.String() == cur.String() {
			return nil
		}
	}
	if err := topics.WriteDescriptor(a.cfg.Brokers, admin, base, a.cfg.Topics.ReplicationFactor, cur.ApplicationID, []byte(cur.String())); err != nil {
		return fmt.Errorf("weir: %w", err)
	}
	return nil
}

// settle refuses the start on a refused difference whose store
// Config.AllowDropState does not name, listing every difference; for the
// ones it names, drop deletes the store's state first. With logChanges
// it logs the differences that are not refused.
func (a *App) settle(diffs []Difference, logChanges bool, drop func(store string) error) error {
	var refused bool
	for _, d := range diffs {
		switch {
		case !d.Refused:
			if logChanges {
				a.cfg.Logger.Info("topology changed", "application", a.cfg.ApplicationID, "change", d.String())
			}
		case d.Store != "" && a.allowedToDrop(d.Store):
		default:
			refused = true
		}
	}
	if refused {
		return &UpgradeError{Differences: diffs}
	}
	dropped := map[string]bool{}
	for _, d := range diffs {
		if d.Refused && !dropped[d.Store] {
			dropped[d.Store] = true
			a.cfg.Logger.Warn("dropping a store's state, as Config.AllowDropState allows", "application", a.cfg.ApplicationID, "store", d.Store, "change", d.What)
			if err := drop(d.Store); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *App) allowedToDrop(store string) bool {
	for _, s := range a.cfg.AllowDropState {
		if s == store {
			return true
		}
	}
	return false
}

// waitTopicGone waits, for at most 30 s, until topic is out of the
// cluster's metadata, so that creating it again makes a new, empty topic.
func waitTopicGone(client sarama.Client, topic string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := client.RefreshMetadata(topic)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return nil
		}
		if ps, perr := client.Partitions(topic); errors.Is(perr, sarama.ErrUnknownTopicOrPartition) || perr == nil && len(ps) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("weir: topic %s still exists 30 s after it was deleted", topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// resetEpochFile holds, in an application's state directory, the reset
// epoch its local state belongs to.
const resetEpochFile = "reset-epoch"

// followReset deletes the local state when the application was reset
// (`weir reset`) since it was written: epoch, the topology topic's, is
// above the one recorded in dir. A state directory without a record is of
// epoch 0.
func (a *App) followReset(db *statelog.DB, dir string, epoch int64) error {
	path := filepath.Join(dir, resetEpochFile)
	var local int64
	if b, err := os.ReadFile(path); err == nil {
		local, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("weir: reading %s: %w", path, err)
	}
	if epoch <= local {
		return nil
	}
	a.cfg.Logger.Warn("the application was reset: deleting its local state", "application", a.cfg.ApplicationID, "reset_epoch", epoch, "local_epoch", local)
	if err := db.DropAll(); err != nil {
		return err
	}
	if err := statedir.WriteFile(path, []byte(strconv.FormatInt(epoch, 10)+"\n")); err != nil {
		return fmt.Errorf("weir: recording the reset epoch in %s: %w", path, err)
	}
	return nil
}
