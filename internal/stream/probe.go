package stream

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
)

// Probe timing: how long a probe waits for its join to reach the group,
// and its session timeout (the broker's smallest by default), which
// bounds how long a probe that could not leave stays in the group.
const (
	probeJoinWait       = 5 * time.Second
	probeSessionTimeout = 6 * time.Second
)

// Prober starts probing rebalances of the instance's group: the rebalance
// in which the group leader moves a task to the warm-up that caught up
// with it (assign.KeepCaughtUp).
//
// sarama offers no way for a member to ask for a rebalance (the Java
// client's enforceRebalance) short of ending its session, which would
// close every task of the member. A probe instead joins the group as a
// member of its own, on a connection of its own: a new member makes the
// coordinator start a rebalance, which every member joins after its next
// heartbeat. As soon as its join has reached the group, the probe is
// removed again (it joins with a group instance id for that, KIP-345), so
// the rebalance completes without it, in one round, as any cooperative
// rebalance does: the members keep their tasks but for the ones that
// move. Should the probe still be there when the leader plans, its
// subscription (assign.ProbeUserData) gets it nothing, and it leaves the
// group when its session (probeSessionTimeout) times out.
type Prober struct {
	Client    *client.Options
	Admin     sarama.ClusterAdmin
	Group     string
	ProcessID string

	seq atomic.Int64
}

// Probe starts one probing rebalance of the group and returns once the
// probe has joined and left, or failed to (the error says which). It
// takes about one round trip to the coordinator and the time the group
// takes to start the rebalance; it does not wait for the rebalance to
// complete.
func (p *Prober) Probe(ctx context.Context) error {
	// A member joining while the leader plans (CompletingRebalance) makes
	// the leader's SyncGroup fail, and the group waits for every member to
	// join again: only a Stable group is probed. A rebalance under way
	// holds subscriptions from before the warm-up caught up, so the probe
	// is only put off (ErrGroupBusy).
	if state, err := p.state(); err != nil {
		return err
	} else if state != "Stable" {
		return fmt.Errorf("%w (%s)", ErrGroupBusy, state)
	}
	coord, err := p.Admin.Coordinator(p.Group)
	if err != nil {
		return fmt.Errorf("weir: probing rebalance: finding the group coordinator: %w", err)
	}
	prefix := p.Client.ClientID
	if prefix == "" {
		prefix = p.Client.ApplicationID
	}
	// Unique per probe, so that a probe is never taken for an earlier one
	// still in the group (a static member rejoining with its metadata
	// unchanged starts no rebalance).
	id := fmt.Sprintf("%s-probe-%s-%d-%d", prefix, p.ProcessID, time.Now().UnixMilli(), p.seq.Add(1))
	conf := client.Base(p.Client, id)
	b := sarama.NewBroker(coord.Addr())
	if err := b.Open(conf); err != nil {
		return fmt.Errorf("weir: probing rebalance: connecting to the coordinator: %w", err)
	}
	defer b.Close()

	joined := make(chan error, 1)
	req, err := p.joinRequest(conf, id)
	if err != nil {
		return err
	}
	go func() {
		resp, err := b.JoinGroup(req)
		if err == nil && resp.Err != sarama.ErrNoError {
			err = resp.Err
		}
		joined <- err
	}()
	// Wait until the group knows the probe (or its join failed), then
	// remove it: also after the wait ran out, in case the join lands.
	late, err := p.awaitJoined(ctx, id, joined)
	if err != nil {
		return err
	}
	return errors.Join(late, p.remove(id))
}

// joinRequest is the probe's JoinGroup: a static member (instance id id)
// whose subscription says it is a probe (assign.ProbeUserData).
func (p *Prober) joinRequest(conf *sarama.Config, id string) (*sarama.JoinGroupRequest, error) {
	req := sarama.NewJoinGroupRequest(conf.Version)
	if req.Version < 5 {
		req.Version = 5 // the first with group instance ids
	}
	req.GroupId = p.Group
	req.GroupInstanceId = &id
	req.SessionTimeout = int32(probeSessionTimeout / time.Millisecond)
	req.RebalanceTimeout = req.SessionTimeout
	req.ProtocolType = "consumer"
	if req.Version >= 8 {
		reason := "weir: probing rebalance (a warm-up task caught up)"
		req.Reason = &reason
	}
	if err := req.AddGroupProtocolMetadata(assign.StrategyName, &sarama.ConsumerGroupMemberMetadata{Version: 1, UserData: assign.ProbeUserData()}); err != nil {
		return nil, fmt.Errorf("weir: probing rebalance: %w", err)
	}
	return req, nil
}

// awaitJoined waits until the group knows the probe id, its join returns,
// or probeJoinWait passes (late says so); err is a failed join or ctx's
// end.
func (p *Prober) awaitJoined(ctx context.Context, id string, joined <-chan error) (late, err error) {
	deadline := time.Now().Add(probeJoinWait)
	for in := false; !in; {
		select {
		case err := <-joined:
			if err != nil && !errors.Is(err, sarama.ErrUnknownMemberId) {
				return nil, fmt.Errorf("weir: probing rebalance: joining: %w", err)
			}
			in = true // joined and done: the rebalance has completed
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if !in {
			if in, err = p.joined(id); err != nil {
				return nil, err
			}
		}
		if !in && time.Now().After(deadline) {
			return fmt.Errorf("weir: probing rebalance: the probe's join did not reach the group within %s", probeJoinWait), nil
		}
	}
	return nil, nil
}

// remove takes the probe id out of the group; one the group no longer
// knows is gone already.
func (p *Prober) remove(id string) error {
	resp, err := p.Admin.RemoveMemberFromConsumerGroup(p.Group, []string{id})
	if err == nil {
		kerr := resp.Err
		for _, m := range resp.Members {
			if kerr == sarama.ErrNoError {
				kerr = m.Err
			}
		}
		if kerr != sarama.ErrNoError {
			err = kerr
		}
	}
	if err != nil && !errors.Is(err, sarama.ErrUnknownMemberId) {
		return fmt.Errorf("weir: probing rebalance: removing the probe from the group (it leaves when its session times out, after %s): %w", probeSessionTimeout, err)
	}
	return nil
}

// ErrGroupBusy is returned by Prober.Probe when the group is not Stable:
// a rebalance is under way, and the probe is to be tried again after it.
var ErrGroupBusy = errors.New("weir: probing rebalance put off: the group is rebalancing")

// state returns the group's state ("Stable", "PreparingRebalance", ...).
func (p *Prober) state() (string, error) {
	groups, err := p.Admin.DescribeConsumerGroups([]string{p.Group})
	if err != nil {
		return "", fmt.Errorf("weir: probing rebalance: describing the group: %w", err)
	}
	if len(groups) != 1 {
		return "", fmt.Errorf("weir: probing rebalance: describing the group: %d answers", len(groups))
	}
	return groups[0].State, nil
}

// joined reports whether the group lists a member with client id id.
func (p *Prober) joined(id string) (bool, error) {
	groups, err := p.Admin.DescribeConsumerGroups([]string{p.Group})
	if err != nil {
		return false, fmt.Errorf("weir: probing rebalance: describing the group: %w", err)
	}
	for _, g := range groups {
		for _, m := range g.Members {
			if m.ClientId == id {
				return true, nil
			}
		}
	}
	return false, nil
}
