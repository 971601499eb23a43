package weir

import (
	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/stream"
	"github.com/weirstream/weir/internal/task"
	"maps"
)

// How a Config becomes the settings of the runtime's packages.

// clientOptions returns the settings that shape weir's sarama clients.
func (c *Config) clientOptions() *client.Options {
	o := &client.Options{
		ApplicationID: c.ApplicationID,
		ClientID:      c.ClientID,
		TLS:           c.tls,
		SASLMechanism: string(c.Security.SASL.Mechanism), SASLUser: c.Security.SASL.User, SASLPassword: c.Security.SASL.Password,
		DialTimeout:       c.Net.DialTimeout,
		RequestTimeout:    c.Net.RequestTimeout,
		FetchMaxWait:      c.Consumer.FetchMaxWait,
		SessionTimeout:    c.Consumer.SessionTimeout,
		HeartbeatInterval: c.Consumer.HeartbeatInterval,
		RebalanceTimeout:  c.Consumer.RebalanceTimeout,
		StaticMemberID:    c.StaticMemberID,
		StaticFromProcess: c.StaticMembership,
	}
	if c.Guarantee == ExactlyOnce {
		o.TransactionTimeout = c.TransactionTimeout
	}
	return o
}

// cacheBudget returns the record caches' budget, nil when caching is off.
func (c *Config) cacheBudget() *graph.CacheBudget {
	if c.CacheMaxBytes <= 0 {
		return nil
	}
	return graph.NewCacheBudget(c.CacheMaxBytes)
}

// taskConfig returns what tasks need of c.
func (c *Config) taskConfig() task.Config {
	tc := task.Config{
		ApplicationID:         c.ApplicationID,
		MaxTaskIdle:           c.MaxTaskIdle,
		DeserializationErrors: c.DeserializationErrors,
		TimestampErrors:       c.TimestampErrors,
		ProcessingErrors:      c.ProcessingErrors,
		ProductionErrors:      c.ProductionErrors,
		TopicErrors:           maps.Clone(c.TopicErrors),
		ExactlyOnce:           c.Guarantee == ExactlyOnce,
		CleanupDelay:          c.Stores.CleanupDelay,
		BulkRestoreMin:        c.Stores.BulkRestoreMinRecords,
	}
	if c.Stores.RestoreListener != nil {
		tc.RestoreListener = c.Stores.RestoreListener
	}
	return tc
}

// streamConfig returns what stream threads need of c.
func (c *Config) streamConfig() stream.Config {
	return stream.Config{
		Brokers:                  c.Brokers,
		Client:                   c.clientOptions(),
		ExactlyOnce:              c.Guarantee == ExactlyOnce,
		CommitInterval:           c.CommitInterval,
		MaxCommitInterval:        c.MaxCommitInterval,
		TransactionTimeout:       c.TransactionTimeout,
		RebalanceTimeout:         c.Consumer.RebalanceTimeout,
		PurgeInterval:            c.Topics.PurgeInterval,
		MaxBufferBytes:           c.Stores.MaxBufferBytes,
		QueueRecords:             c.Queue.MaxRecords,
		QueueBytes:               c.Queue.MaxBytes,
		MaxConsecutiveAborts:     c.MaxConsecutiveAborts,
		StandbyReplicas:          c.StandbyReplicas,
		Warmups:                  assign.Warmups{AcceptableLag: c.AcceptableRecoveryLag, PerProcess: max(c.MaxWarmups, 0)},
		ProbingRebalanceInterval: c.ProbingRebalanceInterval,
		AdvertisedAddr:           c.AdvertisedAddr,
		Logger:                   c.Logger,
	}
}
