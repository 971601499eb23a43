package stream

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/task"
)

// Config is what the stream threads need of the application's
// configuration (weir.Config, with its defaults applied).
type Config struct {
	Brokers        []string
	Client         *client.Options
	ExactlyOnce    bool
	CommitInterval time.Duration
	// MaxCommitInterval bounds the commit interval of a thread that is
	// behind (see Thread.nextInterval).
	MaxCommitInterval  time.Duration
	TransactionTimeout time.Duration
	RebalanceTimeout   time.Duration
	PurgeInterval      time.Duration
	MaxBufferBytes     int
	QueueRecords       int
	QueueBytes         int
	// MaxConsecutiveAborts is how many transactions in a row may abort
	// without one committing before the thread fails.
	MaxConsecutiveAborts int
	// StandbyReplicas is how many standby copies of each stateful task
	// the group leader places (Config.StandbyReplicas).
	StandbyReplicas int
	// Warmups is how the group leader keeps tasks with their caught-up
	// owners while warm-ups catch up (Config.MaxWarmups,
	// Config.AcceptableRecoveryLag); the zero value places none.
	Warmups assign.Warmups
	// ProbingRebalanceInterval is how often an instance holding warm-ups
	// starts a probing rebalance even though none caught up.
	ProbingRebalanceInterval time.Duration
	// AdvertisedAddr is where the instance serves queries of its stores
	// (Config.AdvertisedAddr), sent to the group leader; "" for none.
	AdvertisedAddr string
	Logger         *slog.Logger
}

// Instance is what the threads of one instance share. It is set up once,
// before the first thread, and read-only after.
type Instance struct {
	Config
	*task.Shared
	// ProcessID identifies the instance across restarts (its state
	// directory's).
	ProcessID string
	Admin     sarama.ClusterAdmin
	// AdminMeta is the client Admin was made from: the open-transaction
	// checks refresh its metadata when a partition's cached leader no
	// longer leads it. nil: not refreshed.
	AdminMeta sarama.Client
	// OnPublish is called after a thread published a change of its tasks.
	OnPublish func()
	// Standbys runs the instance's standby and warm-up tasks; nil without
	// either.
	Standbys *Standbys
	// Hosts is where the group's tasks run, as of the newest assignment
	// any thread of the instance received; nil: not kept.
	Hosts *Hosts
	// Members keeps each thread's last group member id across restarts
	// (the state directory); nil: not kept.
	Members Members
}

// Members keeps the group member id each thread last joined with.
type Members interface {
	MemberID(thread int) string
	SetMemberID(thread int, id string) error
}

// Hosts is the group's hosts (assign.Assignment.Hosts) of the newest
// generation a thread of the instance was assigned. Safe for concurrent
// use.
type Hosts struct {
	mu    sync.Mutex
	gen   int32
	at    time.Time // when gen's hosts arrived
	hosts []assign.Host
}

// set records the hosts of generation gen, unless a thread already gave
// those of a newer one.
func (h *Hosts) set(gen int32, hosts []assign.Host) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen > h.gen {
		h.at = time.Now()
	}
	if gen >= h.gen {
		h.gen, h.hosts = gen, hosts
	}
}

// Get returns the hosts and their generation (0 before any assignment).
// The slice is shared: do not modify it.
func (h *Hosts) Get() ([]assign.Host, int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hosts, h.gen
}

// Since returns the newest generation and when a thread of the instance
// first received it: the instance's last rebalance (zero before any).
func (h *Hosts) Since() (int32, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen, h.at
}

// ErrFenced is weir.ErrInstanceFenced: another instance took this instance's
// transactional ids.
var ErrFenced = errors.New("weir: producer fenced")
