package mutation

import (
	"testing"

	"github.com/ferrymq/ferry/transport/transporttest"
)

// The Redis Streams transport's mutants (issues 17 and 18): each bug is
// killed by a named test of transport/redisstream, against the shared
// Redis (and private redis-servers the tests start). Redis acks entry by
// entry (XACK of IDs, no offset), so "commit past unfinished work" has
// no literal form here; its kin is handing a stream to the next member
// while deliveries of it are still in flight (handover-in-flight).
//
// The mutants share three -run patterns, so that the kit builds and runs
// three controls for them, not one per mutant.
const (
	redisPkg = "./transport/redisstream"
	// redisUnit: the package's own tests, a few seconds in all.
	redisUnit = "^(TestPlaintextAuth|TestPublishOutage|TestGroupRecreated|TestMaxExtend|TestNackLongerThanClaimIdle|TestTrimmedPendingTakeover|TestLostReadReplyKeepsOrder|TestExtendKeepsLease)$"
	// redisSuite: the conformance cases of the default URL that count
	// acks and headers.
	redisSuite = "^TestConformance$/^Default$/^(Ack|Headers)$"
	// redisHandover: members joining and leaving a sharded topic.
	redisHandover = "^(TestExclusiveHandover|TestFailoverStandbyTakesLease)$"
)

func redis(tb testing.TB) { transporttest.RequireBroker(tb, "redis", "127.0.0.1:6379") }

func init() {
	register("redisstream", []Mutant{
		{
			Name: "ack-at-receive", // every entry read is acked at once, before the handler ran
			Pkg:  redisPkg, File: "transport/redisstream/fetch.go",
			Find: "\t\t\ts.setDelivery(&b.ds[i], b, sh, x, 1, now)\n\t\t\ti++\n\t\t}\n\t}\n\ts.track(b)\n",
			Replace: "\t\t\ts.setDelivery(&b.ds[i], b, sh, x, 1, now)\n\t\t\ti++\n\t\t}\n\t}\n\ts.track(b)\n" +
				"\tfor j := range b.ds {\n\t\t_ = s.acks.queue(ctx, b.ds[j].sh, b.ds[j].id)\n\t}\n",
			Run:      redisSuite,
			Want:     "not redelivered to the next consumer",
			Requires: redis,
		},
		{
			Name: "ack-all", // one Ack acks every entry read with it
			Pkg:  redisPkg, File: "transport/redisstream/delivery.go",
			Find: "\tif err := s.acks.queue(ctx, d.sh, d.id); err != nil {\n",
			Replace: "\tfor i := range d.b.ds {\n\t\t_ = s.acks.queue(ctx, d.sh, d.b.ds[i].id)\n\t}\n" +
				"\tif err := s.acks.queue(ctx, d.sh, d.id); err != nil {\n",
			Run:      redisSuite,
			Want:     "not redelivered to the next consumer",
			Requires: redis,
		},
		{
			Name: "no-reclaim", // entries whose lease ran out (Nacked, or a dead member's) are never taken over
			Pkg:  redisPkg, File: "transport/redisstream/fetch.go",
			Find:     "\t\t\tif err := s.claim(ctx, sh, s.cfg.claimIdle); err != nil {",
			Replace:  "\t\t\tif err := error(nil); err != nil {",
			Run:      redisUnit,
			Want:     "nothing received within",
			Requires: redis,
		},
		{
			Name: "no-takeover", // a member that acquires a stream reads new entries before the pending ones of the previous owner
			Pkg:  redisPkg, File: "transport/redisstream/reclaim.go",
			Find:     "\tflushed := false\n\tfor _, sh := range s.shards {\n\t\tif !sh.takeover.Load() || !sh.held.Load() {",
			Replace:  "\tflushed := false\n\tfor _, sh := range s.shards {\n\t\tsh.takeover.Store(false)\n\t\tif !sh.takeover.Load() || !sh.held.Load() {",
			Run:      redisHandover,
			Want:     "--- FAIL: TestFailoverStandbyTakesLease",
			Requires: redis,
		},
		{
			Name: "handover-in-flight", // a member gives a stream up with deliveries of it still unsettled
			Pkg:  redisPkg, File: "transport/redisstream/lease.go",
			Find:     "\tif sh.active.Load() > 0 {\n\t\treturn // next tick\n\t}",
			Replace:  "",
			More:     []Edit{{File: "transport/redisstream/lease.go", Find: "\tif sh.active.Load() > 0 || s.closed.Load() {", Replace: "\tif s.closed.Load() {"}},
			Run:      redisHandover,
			Want:     "--- FAIL: TestExclusiveHandover",
			Requires: redis,
		},
		{
			Name: "no-heartbeat", // an unsettled entry's lease is never refreshed: another member takes work in progress
			Pkg:  redisPkg, File: "transport/redisstream/heartbeat.go",
			Find:     "\t\tcase <-t.C:\n\t\t\ts.beat()",
			Replace:  "\t\tcase <-t.C:",
			Run:      redisUnit,
			Want:     "while A was still working on it",
			Requires: redis,
		},
		{
			Name: "extend-noop", // Extend returns nil and refreshes nothing
			Pkg:  redisPkg, File: "transport/redisstream/delivery.go",
			Find:     "func (d *delivery) Extend(ctx context.Context, dur time.Duration) error {\n\ts := d.s\n",
			Replace:  "func (d *delivery) Extend(ctx context.Context, dur time.Duration) error {\n\ts := d.s\n\tif s != nil {\n\t\treturn nil\n\t}\n",
			Run:      redisUnit,
			Want:     "Extend(2s) must hold the entry beyond max_extend",
			Requires: redis,
		},
		{
			Name: "wrong-attempt", // a taken-over entry is delivered as attempt 1, whatever its PEL count
			Pkg:  redisPkg, File: "transport/redisstream/reclaim.go",
			Find:     "\t\t\tif n, ok := counts[i].(int64); ok {\n\t\t\t\tattempt = int(n)",
			Replace:  "\t\t\tif n, ok := counts[i].(int64); ok {\n\t\t\t\tattempt = int(n) / int(n)",
			Run:      redisUnit,
			Want:     "want later, attempt 2",
			Requires: redis,
		},
		{
			Name: "dropped-headers", // fields other than the ID, Key and payload are not read back
			Pkg:  redisPkg, File: "transport/redisstream/wire.go",
			Find:     "\t\t\thdr[k] = s\n",
			Replace:  "",
			Run:      redisSuite,
			Want:     "--- FAIL: TestConformance/Default/Headers",
			Requires: redis,
		},
		{
			Name: "no-reread", // after a lost XREADGROUP reply, newer entries are read before the consumer's own pending ones (issue 17 item 8)
			Pkg:  redisPkg, File: "transport/redisstream/fetch.go",
			Find:     "\tif s.reread {\n",
			Replace:  "\tif s.reread && false {\n",
			Run:      redisUnit,
			Want:     "handled in the order",
			Requires: redis,
		},
		{
			Name: "no-group-recreate", // after the stream and group vanish, the group is never created again
			Pkg:  redisPkg, File: "transport/redisstream/fetch.go",
			Find:     "\t\t\tif isNoGroup(err) { // whichever read found it: new, own or claim\n\t\t\t\ts.recreateGroups(ctx)\n\t\t\t}\n",
			Replace:  "",
			Run:      redisUnit,
			Want:     "the group was not created again",
			Requires: redis,
		},
		{
			Name: "plaintext-auth", // credentials go over redis:// without the opt-in (issue 17 item 6)
			Pkg:  redisPkg, File: "transport/redisstream/url.go",
			Find:     "(cfg.username != \"\" || cfg.password != \"\") && !cfg.plaintextAuth {",
			Replace:  "(cfg.username != \"\" || cfg.password != \"\") && !cfg.plaintextAuth && false {",
			Run:      redisUnit,
			Want:     "want ErrInvalidOption naming allow_plaintext_auth",
			Requires: redis,
		},
		{
			Name: "publish-retried", // an XADD whose reply was lost is sent again: a second entry, and the caller told it succeeded
			Pkg:  redisPkg, File: "transport/redisstream/publish.go",
			Find:     "\t\tif err := t.rc.XAdd(ctx, items[0].args).Err(); err != nil {",
			Replace:  "\t\tif err := t.c.XAdd(ctx, items[0].args).Err(); err != nil {",
			Run:      redisUnit,
			Want:     "written once, not sent again",
			Requires: redis,
		},
		{
			Name: "trimmed-silent", // pending entries Redis dropped as trimmed under a member's refresh are neither counted nor logged
			Pkg:  redisPkg, File: "transport/redisstream/heartbeat.go",
			Find:     "\ts.dropped(sh, gone)\n\treturn lost, gone, nil",
			Replace:  "\treturn lost, gone, nil",
			Run:      redisUnit,
			Want:     "Stats().Trimmed = 0, want 3",
			Requires: redis,
		},
	})
}
