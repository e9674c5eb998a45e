package seed

import (
	"fmt"
	"math/rand/v2"
)

// deleteShare is the share of Changes' writes that delete a key (events
// expiring, pods replaced); a deleted key is created again by a later
// write of the same object.
const deleteShare = 0.05

// Changes is a deterministic stream of the writes a running Kubernetes
// control plane makes: updates of the objects Kubernetes (Options.Objects
// and Options.Seed: the keys of a database seeded with the same options)
// creates, with values of the same shape and sizes (Options.MinValue to
// MaxValue), some deletes, and creates of the deleted keys again. The
// benchmarks of continuous capture and replay use it. It is not safe for
// concurrent use.
type Changes struct {
	o       Options
	objs    []object
	g       *generator
	r       *rand.Rand
	version []int32
	deleted []bool
}

// NewChanges returns the stream of opts (defaults as for Kubernetes).
func NewChanges(opts Options) (*Changes, error) {
	o := opts.WithDefaults()
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("seed options: %w", err)
	}
	objs := objects(o.Seed, o.Objects, o.Namespaces)
	return &Changes{
		o: o, objs: objs, g: newGenerator(),
		r:       rand.New(rand.NewPCG(uint64(o.Seed), 0x6368616e676573)),
		version: make([]int32, len(objs)), deleted: make([]bool, len(objs)),
	}, nil
}

// Next returns the next write: a put of value to key, or (del) a delete
// of key. value is valid until the next call.
func (c *Changes) Next() (key string, value []byte, del bool) {
	// Namespaces occupy the first indexes and are never deleted.
	idx := c.o.Namespaces + c.r.IntN(len(c.objs)-c.o.Namespaces)
	obj := &c.objs[idx]
	if !c.deleted[idx] && c.r.Float64() < deleteShare {
		c.deleted[idx] = true
		return obj.key, nil, true
	}
	c.deleted[idx] = false
	// Versions above the seed's rounds: never the value the seed wrote.
	c.version[idx]++
	return obj.key, c.g.value(c.o, obj, idx, 1000+int(c.version[idx])), false
}
