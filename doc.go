// Package election elects one leader among many candidates through a MySQL
// or MariaDB server that the candidates already use: one active instance of
// a scheduler, a queue consumer or a controller, failover in milliseconds
// when the leader dies, and fencing tokens so that a stale leader cannot
// corrupt data.
//
// The sections below go in the order a new user needs them: running for
// leadership, choosing a strategy, sessions, the timing contract, fencing,
// operating an election, the errors to branch on, and the guarantees and
// limits. The
// module's README has a program to start from, and its docs directory the
// protocol, the operations guide and the measurements.
//
// # Running for leadership
//
// An [Elector] is one candidate in one election, made by [New] from the
// caller's *sql.DB and the election's name. Its [Elector.Run] is the usual
// entry point: it campaigns, calls the leader's function with a context
// that ends when leadership is lost or Run's context ends, and campaigns
// again when the term ends, whether the function returned or leadership was
// lost. An error wrapping [ErrStop] ends Run. After Run's context ends the
// function has Margin to return; then the term is resigned without it.
//
//	err := e.Run(ctx, func(ctx context.Context, t *election.Term) error {
//		return work(ctx, t) // until ctx ends
//	})
//
// [Elector.Campaign] and [Term] give finer control: Campaign blocks until
// this candidate leads and returns the term, whose context ends when the
// term does; call [Term.Resign] when its work has stopped. [Elector.TryRun]
// runs a scheduled task on one instance only, without waiting.
// [Elector.Leader] tells a follower who leads, and [Config.Value] is what a
// leader proclaims there (an address, say). [NewShards] makes each process
// a member of a group of elections, one per shard, each with its own term
// and token.
//
// # Choosing a strategy
//
// Leave [Config.Strategy] unset ([Auto]): each candidate takes, at its first
// campaign, the strategy the server can serve, and logs which and why.
//
// With [GetLock], taken wherever the server's GET_LOCK can hold an election
// (a MySQL or MariaDB primary), each candidate pins one session from the
// caller's *sql.DB and blocks in GET_LOCK. The winner bumps a per-election
// epoch, which is the term's fencing token, and keeps its session busy with
// keepalives that confirm it still holds the lock. When the leader's
// process dies the server frees the lock, and the next candidate leads
// milliseconds later.
//
// # Sessions
//
// A process in many elections shares sessions. Each of the first four
// GetLock candidates on a *sql.DB, and each with [Config.OwnSession], pins
// a session of its own ([SessionOwn]); every other one (and every shard of
// [NewShards]) joins a session shared with up to 999 of the process's other
// elections on that pool ([SessionShared]), which holds all their locks, renews all
// their terms in one statement per Interval and tries all their locks in
// one per CheckInterval: their failover follows those tries, not the
// server's end of a session, so it takes up to CheckInterval and the term
// start rather than milliseconds (longer when thousands fail over at once:
// docs/benchmarks.md). LeaseRow candidates pin no session ([SessionPool]):
// their renewals and reads go through the pool, batched per process. Which
// one a candidate has is in its row ([Candidate.Session], electctl
// candidates' SESSION column), in [Observer.Campaigning] and the metrics
// adapters' session gauge, and the first candidate that shares a pool's
// session says so in the log.
//
// [LeaseRow] holds the election with a lease in a row instead, renewed
// through the pool: for Galera, multi-primary Group Replication, TiDB and
// connection-multiplexing proxies, at the price of failing over only after
// Lease+Margin when a leader dies.
//
// # Timing contract
//
// Interval (I) is how often the leader renews; Lease (L) is how long it may
// act after the last confirmed keepalive, measured from the moment that
// keepalive was sent, on its own monotonic clock; Margin (S) is the time
// between the end of that lease and the earliest moment the server can give
// the lock to someone else. Every pinned session gets wait_timeout
// W = L + S, rounded up to whole seconds, so a leader that stops talking
// (paused, partitioned, its host dead) is dropped by the server W after its
// last command, which is S after its own lease has already ended its term.
// [New] checks these relations and reports a bad [Config] with the fix.
//
// # Fencing
//
// Every term has a token ([Term.Token]) above that of every earlier term of
// the election. [Term.Fenced] (and [Term.FencedTx]) commits a transaction in
// the election's database only while no newer term exists: it holds a shared
// lock on the election's epoch row and checks it, and a new term must bump
// that row first. A refused write returns a [StaleTokenError] wrapping
// [ErrFenced], and nothing of it is committed. For other stores, send the
// token with the write ([Term.SetToken] and [TokenFrom] for HTTP) and check
// it with a [Fence], or in SQL with a condition on the token. Writes that
// do not check the token are not fenced.
//
// # Operating an election
//
// An [Operator], made by [NewOperator], reads and steers an election
// without campaigning: [Operator.Leader], [Operator.Watch],
// [Operator.History], [Operator.Candidates], [Operator.Demote],
// [Operator.Handover] and [Operator.Remove]. The electctl command
// (cmd/electctl) is built on it. [Elector.LeaderHandler] answers 200 only
// on the leader, for a load balancer; [Elector.HealthHandler] answers 503
// when a supervisor should restart the process (leader code that did not
// stop). [Config.Health] ties leadership to a health check, and
// [Config.Observer] reports terms, failovers and renewals (the electionprom
// and electionotel modules turn them into metrics). Candidates create their
// tables on first use; where a DBA creates them instead, [SchemaDDL] gives
// the DDL and [Config.SkipCreateTables] keeps candidates from trying.
//
// # Errors
//
// Errors the package returns wrap the sentinels in errors.go; branch on
// them with errors.Is. [New] and [NewOperator] report bad input as
// [ErrInvalidConfig], naming the fix. Run retries a campaign that failed
// for a reason retrying can fix (a server down or restarting), and returns
// at once [ErrAccessDenied], [ErrSchema] or [ErrInvalidConfig], which
// retrying with the same DSN cannot. Why a term ended is [Term.Err]:
// [ErrResigned], [ErrLeaseExpired], [ErrSessionLost], [ErrLockLost],
// [ErrDemoted], [ErrUnhealthy], or the cause of the context given to
// Campaign. GetLock on a server where GET_LOCK cannot
// hold an election is [ErrUnsupported].
//
// # Guarantees and limits
//
// While the server keeps the leader's session alive, no other candidate can
// hold the lock. A leader that loses the server's attention ends its term,
// and cancels the term's context, before the server frees the lock, provided
// the leader's clock runs slow and the waiters' clocks run fast by less than
// S over L + S together, and its code stops acting within S of the
// cancellation. A step of the server's clock, or of a candidate's wall
// clock, deposes no healthy leader and holds no failover back: candidates
// decide by their own monotonic clocks (docs/protocol.md, "Clocks").
//
// The server itself may end a live leader's session (a restart, a DBA's
// KILL, a proxy reset). The next candidate then leads at once, while the old
// leader learns of it at its next keepalive, within I. Only writes checked
// with the term's fencing token are safe in that window: use Term.Fenced in
// the same database and Fence (or the token) in downstream stores. Writes
// that do not check the token are not fenced.
//
// Tokens are durable InnoDB rows, above every earlier token and at least
// the server's clock in microseconds, so a replica promoted after its
// primary died issues none twice, even one that lost the last terms, as
// long as the failover takes longer than the two servers' clocks differ
// (docs/operations.md, "Clusters and replicas"). GET_LOCK is not cluster-wide on
// Galera or multi-primary Group Replication, and cannot hold an election on
// TiDB: GetLock is refused there.
//
// # Examples
//
// Recipes to copy, each a program run by its test against a real server,
// are in the module's examples directory: examples/quickstart (a
// long-running leader), examples/queue (a queue consumer: each job claimed
// under the fencing token, worked on outside any transaction, completed
// only while the claim stands), examples/cron (a scheduled job done once
// per period across failovers) and examples/fencedstore (a downstream
// store that checks the token with Fence).
package election
