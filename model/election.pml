/*
 * A model of the election protocol for SPIN: docs/verification.md, "The model",
 * says what it abstracts and how scripts/spin.sh checks it.
 *
 * Two candidates; the server: its lock table and sessions (wait_timeout,
 * KILL), the record row, the epoch row and its row locks; the replica a
 * primary failover promotes; an operator; a downstream store's Fence. Time
 * is discrete ticks. GetLock by default, LeaseRow with -DLEASEROW. The
 * comment on each rule names the Go function it models.
 *
 * What the environment does is chosen with -D: STUCK (a keepalive blocks on
 * the server), DEMOTE (one Demote or Handover), PREFER (the leader's own
 * policy, Config.PreferAfter, asks for a hand-over or a demotion, any number
 * of times), EXTKILL (one KILL from outside), FENCED (fenced transactions),
 * DOWNSTREAM (writes to a Fence), FAILOVER (the primary dies once), INFLIGHT
 * (a downstream write arrives late), CLOCKSTEP (the server's clock steps,
 * forward or back, any number of times, and the waiters judge ages by their
 * own watch of it: see below), SESSION_LEASE (GetLock: the term is one of
 * many on a shared session, whose record is renewed by the session's one
 * lease: see renew_eval), PRIORITY (Config.Priority: a candidate that won
 * may give the election back instead of starting its term, at any moment,
 * any number of times: a superset of yielding to a waiting candidate of
 * higher priority, whose condition, on candidate rows the model does not
 * have, only decides when). Config.Health needs no option: an
 * unhealthy leader's end is a Resign, which any leader may do at any time.
 * A variant removes one rule of the safety argument:
 *
 *   WAIT_EQ_LEASE     wait_timeout W = L, not L + S
 *   NO_WAIT_TIMEOUT   the server never drops an idle session
 *   NO_EPOCH_CHECK    Fenced locks the epoch row but does not compare it
 *   NO_EPOCH_LOCK     Fenced compares the epoch without LOCK IN SHARE MODE
 *   LEASE_FROM_REPLY  a lease counts from a reply's receipt, not its send
 *   DEMOTE_AT_ONCE    a demoted holder is overdue at once, not after L + S
 *   NO_LOCK_DELAY     no lock-delay after a forced end
 *   PLAIN_COUNTER     the bump is GREATEST(epoch + 1, claimed): no clock
 *   FAST_FAILOVER     the failover takes K ticks (the clocks' skew), not K + 1
 *   NO_MARGIN         stale (takeover, hang kill) after L, not L + S
 *   RENEW_UNCHECKED   a keepalive matches whatever term the record names
 *   COMMIT_AFTER_TERM Fenced sends its COMMIT without checking IsLeader
 *   NO_CARRY_LOCK_DELAY the lock-delay is owed by the next term only, not
 *                     carried over in the record until it ends
 *   SERVER_AGE        (with CLOCKSTEP) ages and the carried lock-delay are
 *                     read on the server's clock, as before the watch
 *   FIRST_LOOK        (with CLOCKSTEP) a value a waiter has not seen before
 *                     is as old as the server's clock says
 *   SERVER_DELAY      (with CLOCKSTEP) the carried lock-delay alone is read
 *                     on the server's clock
 *
 * LOCKDELAY_PROMISE makes P3 stronger (below): the carried lock-delay is
 * what it needs (docs/verification.md, "The model").
 *
 * Properties (assertions):
 *   P1 a bump issues a token above every token issued before, on either server;
 *   P2 no fenced write of a term is accepted after one of a later term: the
 *      Fence's, and in the database no COMMIT of a term after a later term's
 *      bump (the stronger form the shared lock gives) in what survives;
 *   P3 no two terms act at once (Term.IsLeader, the lock-delay waited out),
 *      but for a term whose session the server ended while it acted (a KILL
 *      from outside, the failover): the documented window, fencing's case.
 */

#ifndef L
#define L 2             /* Config.Lease, in ticks */
#endif
#ifndef S
#define S 2             /* Config.Margin */
#endif
#ifndef DRIFT
#define DRIFT 1         /* a local timer lasts up to this much longer (lease) or shorter (lock-delay) */
#endif
#ifndef MAXTERMS
#define MAXTERMS 3      /* terms explored */
#endif
#define K 1             /* the old primary's clock runs K ticks ahead of the replica's */

#ifdef WAIT_EQ_LEASE
#define W L
#else
#define W (L+S)         /* Config.waitTimeout: every pinned and fenced session's wait_timeout */
#endif
#ifdef NO_MARGIN
#define STALE L
#else
#define STALE (L+S)     /* the record's lease_us: a renewal this old is stale */
#endif
#ifdef DEMOTE_AT_ONCE
#define DSTALE 0
#else
#define DSTALE STALE    /* a demotion this old is overdue (Record.defied, Record.overdue) */
#endif
#ifdef FAST_FAILOVER
#define F K
#else
#define F (K+1)         /* ticks from the primary's death to the replica's first statement */
#endif
#define AGECAP (L+S)    /* ages saturate here: no rule tells older ones apart */

#ifdef LEASEROW
#define GETLOCK 0
#else
#define GETLOCK 1
#endif

#define NONE 2
/* candidate */
#define OFF 0
#define WAIT 1
#define START 2         /* won (GET_LOCK returned, or a lease try sent): the term start */
#define LEAD 3
/* server session (GetLock's pinned session) */
#define DEAD 0
#define IDLE 1          /* wait_timeout counts */
#define BUSY 2          /* in a statement: GET_LOCK, or a blocked one */
/* record state */
#define FREE 0          /* no term yet; after a failover, whatever the replica has */
#define LEADING 1
#define GRACEFUL 2      /* resigned, demoted, handed-over */
#define KILLED 3        /* hang-killed, demote-killed */
#define ENDED 4         /* lease-expired, session-lost, lock-lost, lost */
/* keepalive in flight */
#define KNONE 0
#define BLOCKED 1       /* executing, blocked on the server */
#define R_OK 2          /* replies in transit */
#define R_DEMOTED 3
#define R_LOST 4
/* why the leader stopped: the term's context */
#define ACTING 0
#define RESIGNED 1
#define DEMOTED 2
#define LOST 3
/* fenced transaction */
#define FNONE 0
#define OPEN 1          /* checked, fn's writes made, not committed */
#define SENT 2          /* COMMIT in flight */
/* server */
#define UP_A 0
#define DOWN 1
#define UP_B 2

byte srv = UP_A, fo_left;
byte since_bump = K+1;          /* ticks since the old primary's last bump, saturated */
bit lostbump;                   /* the replica lacks the last bump and has bumped none since */
/* the epoch row, and the record row (its epoch is the epoch row's) */
byte epoch;
byte rholder = NONE, rstate = FREE;
bit rlive;                      /* GetLock: the recorded session (conn_id) still exists */
byte renew_age = AGECAP;        /* age of renewed_at: on the server's clock, which runs true but for its steps */
bit demoted, handover;          /* demote_epoch = epoch; handover_to */
byte demote_age, hto;
byte prev_epoch, prev_dbhw;     /* before the last bump: what a replica may have */
#ifndef NO_CARRY_LOCK_DELAY
byte rdelay;                    /* delay_until: ticks until the lock-delay owed ends */
#endif
#ifdef CLOCKSTEP
/* Each candidate's watch of the server's clock and of the record
 * (serverClock and Record.vouch, clock.go): its reads form a run while the
 * server's clock moves as its own between them; a step (or a read of
 * another server) starts a new run at its next read (wstale). A stamp made
 * within the run has the age the server's clock gives; one made before is
 * taken as made at the run's first read, which in this model of one
 * election is the read that first sees it. A value of the renewal or the
 * demotion keeps the age vouched for at its first sight, counted on from
 * there on the candidate's own clock (robs, dobs). */
byte robs[2], dobs[2];
bit wstale[2], rseen[2], dseen[2];
byte dltot;                     /* delay_until as written by the claim: ticks from the claim */
#if defined(SERVER_AGE) || defined(FIRST_LOOK) || defined(SERVER_DELAY)
#define SRVCLOCK
bit rfwd, dfwd, dlfwd;          /* a step forward since the renewal, the demotion, delay_until was written */
#endif
#endif
/* the lock table, the pinned sessions */
byte lockh = NONE;
byte sess[2], idle[2];
/* candidates */
byte cst[2], sent_age[2], lease[2], delay[2], stepped[2], ka[2], term[2];
bit cut[2];                     /* its session was ended by a KILL from outside, or the failover */
/* a fenced transaction (one at a time), and the database's history */
byte ftx, fc, fterm;
byte dbhw;                      /* the latest term that bumped or committed */
/* a downstream write in flight, and the store's Fence */
bit dmsg;
byte dterm;
byte fhw;                       /* the latest term the Fence admitted: its token is the highest */
/* terms by start order, and their tokens */
byte gterm;
byte tokof[MAXTERMS+1];
byte max_issued;
/* the environment's budget */
bit ndemote, nkill, nfail;
hidden byte tmp;

/* Term.IsLeader, and Campaign has returned (the lock-delay waited out) */
#define ACTS(c) (cst[c] == LEAD && stepped[c] == ACTING && lease[c] > 0 && delay[c] == 0)
#define P3ACTS(c) (ACTS(c) && !cut[c])
#define P3() assert(!(P3ACTS(0) && P3ACTS(1)))
/* LOCKDELAY_PROMISE: a leader killed from outside while a demotion of it was
 * pending is not excused: the lock-delay is meant to cover it */
#ifdef LOCKDELAY_PROMISE
#define EXCUSED(c) !(demoted && rholder == c && epoch == tokof[term[c]])
#else
#define EXCUSED(c) 1
#endif

#ifdef NO_EPOCH_LOCK
#define SLOCKED 0
#else
#define SLOCKED (ftx != FNONE)  /* the fenced transaction's shared lock on the epoch row */
#endif

#if GETLOCK
#define ALIVE(c) (sess[c] != DEAD)      /* its candidate lock is held (alive) */
#define HOLDS (rlive && lockh == rholder)       /* Record.holds: IS_USED_LOCK = conn_id */
#else
#define ALIVE(c) 1
#define HOLDS 1
#endif
/* termStart.handingOver */
#define HANDING(c) (handover && hto != c && ALIVE(hto))
/* decide's errYield: a hand-over pending, or with PRIORITY at any moment
 * (store.outranked) */
#ifdef PRIORITY
#define YIELDS(c) 1
#else
#define YIELDS(c) HANDING(c)
#endif

/* The ages candidate c decides by (Record.stale, Record.defied,
 * Record.lockDelay, the carried delay_until): the server's, or with
 * CLOCKSTEP those its watch vouches for, read on its own clock, which may
 * run fast by up to DRIFT (WATCHDRIFT). */
#ifdef CLOCKSTEP
#ifdef FIRST_LOOK
#define FIRST_R(c) (rfwd -> AGECAP : renew_age)
#define FIRST_D(c) (dfwd -> AGECAP : demote_age)
#else
#define FIRST_R(c) (wstale[c] -> 0 : renew_age)
#define FIRST_D(c) (wstale[c] -> 0 : demote_age)
#endif
#ifdef SERVER_AGE
#define RAGE(c) (rfwd -> AGECAP : renew_age)
#define DAGE(c) (dfwd -> AGECAP : demote_age)
#define DLEFT(c) (dlfwd -> 0 : rdelay)
#else
#define RAGE(c) (rseen[c] -> robs[c] : FIRST_R(c))
#define DAGE(c) (dseen[c] -> dobs[c] : FIRST_D(c))
#ifdef SERVER_DELAY
#define DLEFT(c) (dlfwd -> 0 : rdelay)
#else
/* the claim's since: delay_until counts from it, exactly if it was
 * written within the run, else from the run's first read */
#define DLEFT(c) (wstale[c] -> dltot : rdelay)
#endif
#endif
#define WATCHDRIFT(dd) dd
/* c reads the record: what it sees first is fixed (Record.vouch) */
inline look(c) {
	if :: !rseen[c] -> robs[c] = RAGE(c); rseen[c] = 1 :: else fi;
	if :: demoted && !dseen[c] -> dobs[c] = DAGE(c); dseen[c] = 1 :: else fi;
	wstale[c] = 0
}
/* the record's renewal, its demotion, its delay_until take new values */
#ifdef SRVCLOCK
#define NEW_RENEWAL() rseen[0] = 0; rseen[1] = 0; robs[0] = 0; robs[1] = 0; rfwd = 0
#define NEW_DEMOTION() dseen[0] = 0; dseen[1] = 0; dobs[0] = 0; dobs[1] = 0; dfwd = 0
#define NEW_DELAY(d) dltot = d; dlfwd = 0
#else
#define NEW_RENEWAL() rseen[0] = 0; rseen[1] = 0; robs[0] = 0; robs[1] = 0
#define NEW_DEMOTION() dseen[0] = 0; dseen[1] = 0; dobs[0] = 0; dobs[1] = 0
#define NEW_DELAY(d) dltot = d
#endif
#else
#define RAGE(c) renew_age
#define DAGE(c) demote_age
#define DLEFT(c) rdelay
#define WATCHDRIFT(dd) 0
#define NEW_RENEWAL() skip
#define NEW_DEMOTION() skip
#define NEW_DELAY(d) skip
#endif

/* A session ends: the server frees its locks; a statement blocked in it fails. */
inline sess_die(c) {
	sess[c] = DEAD; idle[c] = 0;
	if :: lockh == c -> lockh = NONE :: else fi;
	if :: rholder == c && rlive -> rlive = 0 :: else fi;
	if :: ka[c] == BLOCKED && cst[c] == LEAD -> ka[c] = R_LOST
	   :: ka[c] == BLOCKED && cst[c] != LEAD -> ka[c] = KNONE; sent_age[c] = 0; term[c] = 0
	   :: else fi
}

/* SESSION_LEASE: the record of a term on a shared session takes its
 * renewal from the session's lease row (sharedSession.renewAll), which the
 * session's keepalive renews whether or not this term still holds: a
 * demoted term's record stays fresh while its session lives. The keepalive
 * tells the term whether it was demoted as before (the demotion counter). */
#ifdef SESSION_LEASE
#define LEASE_RENEWS(c, age) if :: rholder == c && rstate == LEADING -> renew_age = age; NEW_RENEWAL() :: else fi
#else
#define LEASE_RENEWS(c, age) skip
#endif

/* store.renew on the server, for a keepalive sent `age` ticks ago; then the
 * read of pinned.renew or leaseHold.renew that tells why it matched nothing */
#ifdef RENEW_UNCHECKED
#define OURS(c) 1
#define CLEAR(c) 1
#else
#define OURS(c) (rholder == c && epoch == tokof[term[c]] && \
	(GETLOCK && rlive && lockh == c || !GETLOCK && rstate == LEADING))
#define CLEAR(c) (!demoted)
#endif
inline renew_eval(c, age) {
	if
	:: OURS(c) && CLEAR(c) -> renew_age = age; NEW_RENEWAL(); ka[c] = R_OK
	:: OURS(c) && !CLEAR(c) -> LEASE_RENEWS(c, age); ka[c] = R_DEMOTED
	:: else -> ka[c] = R_LOST
	fi
}

/*
 * The bump's value (termStart.claim): GREATEST(epoch + 1, claimed, the
 * server's clock in microseconds), tokens kept by their order. On the old
 * primary a token is its clock at the bump (one bump per tick, the clock's
 * resolution), so they are ordered as the terms; the replica's first bump is
 * above all of them if it has the last bump, or if its clock has passed the
 * old primary's at that bump (more than K ticks since); else it issues that
 * token again.
 */
#ifdef PLAIN_COUNTER
#define BUMP() tmp = epoch + 1
#else
#define BUMP() \
	if \
	:: srv == UP_B && lostbump && since_bump > K -> tmp = max_issued + 1 \
	:: else -> tmp = epoch + 1 \
	fi
#endif
#ifdef FAILOVER
#define FO_NOTE() prev_epoch = epoch; prev_dbhw = dbhw; \
	if :: srv == UP_A -> since_bump = 0 :: else -> lostbump = 0 fi
#define ONE_PER_TICK (srv != UP_A || since_bump > 0)
#else
#define FO_NOTE() skip
#define ONE_PER_TICK 1
#endif
#ifdef FENCED
#define DB_NOTE() dbhw = gterm
#else
#define DB_NOTE() skip
#endif

/*
 * termStart.open: the read (termStart.read), termStart.decide's decision
 * and lock-delay, and the claim with the bump (termStart.claim, a compare-and-
 * set on that read, and its follow-up), as one step; it waits while a fenced
 * transaction holds the epoch row. The lease runs from `sent`
 * (getLock.acquire, leaseRow.acquire; newTerm), dl ticks longer on a slow
 * clock; the lock-delay (Term.waitLockDelay) is dd ticks shorter on a fast one.
 */
#if GETLOCK
#define CLAIM_GUARD(dd) (cst[me] == START && sess[me] == IDLE && lockh == me && \
	!(rstate == LEADING && renew_age < STALE && HOLDS && rholder != me))
#else
#define CLAIM_GUARD(dd) (cst[me] == START && \
	!(rstate == LEADING && RAGE(me) + WATCHDRIFT(dd) < STALE && !(demoted && DAGE(me) + WATCHDRIFT(dd) >= DSTALE)))
#endif
#ifdef NO_LOCK_DELAY
#define LOCK_DELAY(dd) delay[me] = 0
#else
#ifdef NO_CARRY_LOCK_DELAY
#define LOCK_DELAY(dd) \
	if \
	:: (rstate == KILLED || demoted) && rstate != GRACEFUL && STALE > renew_age + dd -> \
		delay[me] = STALE - renew_age - dd \
	:: else -> delay[me] = 0 \
	fi
#else
/* the record keeps the lock-delay's end (delay_until: rdelay ticks from
 * now), and every claim owes the later of it and its predecessor's */
#define LOCK_DELAY(dd) \
	if \
	:: (rstate == KILLED || demoted) && rstate != GRACEFUL && STALE > RAGE(me) && STALE - RAGE(me) > DLEFT(me) -> \
		rdelay = STALE - RAGE(me) \
	:: else -> rdelay = DLEFT(me) \
	fi; \
	NEW_DELAY(rdelay); \
	if :: rdelay > dd -> delay[me] = rdelay - dd :: else -> delay[me] = 0 fi
#endif
#endif
#ifdef LEASE_FROM_REPLY
#define LEASE_START(dl) lease[me] = L + dl
#else
#define LEASE_START(dl) \
	if :: L + dl > sent_age[me] -> lease[me] = L + dl - sent_age[me] :: else -> lease[me] = 0 fi
#endif
#define CLAIM(dl, dd) \
	:: d_step { CLAIM_GUARD(dd) && srv != DOWN && !SLOCKED && gterm < MAXTERMS && !HANDING(me) && ONE_PER_TICK -> \
		LOCK_DELAY(dd); \
		BUMP(); \
		assert(tmp > max_issued);	/* P1 */ \
		max_issued = tmp; FO_NOTE(); \
		epoch = tmp; gterm++; tokof[gterm] = tmp; term[me] = gterm; DB_NOTE(); tmp = 0; \
		rholder = me; rstate = LEADING; rlive = GETLOCK; renew_age = 0; NEW_RENEWAL(); \
		demoted = 0; demote_age = 0; NEW_DEMOTION(); handover = 0; hto = 0; \
		LEASE_START(dl); \
		sent_age[me] = 0; stepped[me] = ACTING; cut[me] = 0; ka[me] = KNONE; cst[me] = LEAD; idle[me] = 0; \
		printf("c%d starts term %d, token %d: lease %d, lock-delay %d\n", me, gterm, epoch, lease[me], delay[me]); \
		P3() \
	}

/* Term.extend: a confirmed keepalive moves the lease to its send + L, never after it ran out */
#ifdef LEASE_FROM_REPLY
#define EXTEND(dl) if :: lease[me] > 0 -> lease[me] = L + dl :: else fi
#else
#define EXTEND(dl) \
	if :: lease[me] > 0 && L + dl > sent_age[me] -> lease[me] = L + dl - sent_age[me] \
	   :: lease[me] > 0 && L + dl <= sent_age[me] -> lease[me] = 0 \
	   :: else fi
#endif

#ifdef NO_EPOCH_CHECK
#define EPOCH_OK 1
#else
#define EPOCH_OK (epoch == tokof[term[me]])     /* fencedTxn.check */
#endif
#ifdef COMMIT_AFTER_TERM
#define COMMIT_OK 1
#else
#define COMMIT_OK (cst[me] == LEAD && term[me] == fterm && ACTS(me))
#endif

/* The term is over (Term.finish); the candidate campaigns again (Run). */
inline term_over() {
	lease[me] = 0; delay[me] = 0; stepped[me] = ACTING; cut[me] = 0;
#if GETLOCK
	cst[me] = OFF;
	/* pinned.close; a session blocked in a statement lives on, orphaned */
	if :: ka[me] == BLOCKED -> skip :: else -> ka[me] = KNONE; sent_age[me] = 0; term[me] = 0; sess_die(me) fi
#else
	cst[me] = WAIT; ka[me] = KNONE; sent_age[me] = 0; term[me] = 0
#endif
}
/* The leader stops acting: its term's context is cancelled. */
inline step_down(why) {
	if :: stepped[me] == ACTING -> stepped[me] = why; lease[me] = 0; delay[me] = 0 :: else fi
}

proctype Cand(byte me) {
	do
#if GETLOCK
	/* getLock.pin: a session with wait_timeout W; pinned.wait: queued in GET_LOCK */
	:: d_step { cst[me] == OFF && sess[me] == DEAD && srv != DOWN -> sess[me] = BUSY; cst[me] = WAIT }
	/* pinned.getLock returns 1; getLock.acquire takes `sent` */
	:: d_step { cst[me] == WAIT && sess[me] == BUSY && lockh == NONE && srv != DOWN ->
		lockh = me; sess[me] = IDLE; idle[me] = 0; cst[me] = START; sent_age[me] = 0;
		printf("c%d gets the lock\n", me) }
	/* the session is gone: GET_LOCK or the start fails (ErrSessionLost); Run retries */
	:: d_step { (cst[me] == WAIT || cst[me] == START) && sess[me] == DEAD -> cst[me] = OFF; sent_age[me] = 0 }
	/* termStart.decide returns errYield: pinned.yield */
	:: d_step { cst[me] == START && sess[me] == IDLE && srv != DOWN && YIELDS(me) ->
		lockh = NONE; sess[me] = BUSY; idle[me] = 0; cst[me] = WAIT; sent_age[me] = 0;
		printf("c%d yields to the hand-over\n", me) }
#else
	/* leaseRow.acquire: a try, `sent` taken before it */
	:: d_step { cst[me] == WAIT -> cst[me] = START; sent_age[me] = 0 }
	/* termStart.decide: ErrHeld, errYield */
	:: d_step { cst[me] == START && srv != DOWN &&
		(rstate == LEADING && RAGE(me) < STALE && !(demoted && DAGE(me) >= DSTALE) || YIELDS(me)) ->
#ifdef CLOCKSTEP
		look(me);
#endif
		cst[me] = WAIT; sent_age[me] = 0 }
#endif
#if defined(CLOCKSTEP) && GETLOCK
	/* the deputy, a waiter, reads the record: its watch takes what it sees */
	:: d_step { cst[me] == WAIT && srv != DOWN -> look(me) }
	/* pinned.contend, sharedSession.poll: the deputy, a waiter, kills a
	 * holder whose renewal it has seen unchanged for L + S by its own
	 * clock (Record.overdue on the ages it vouches for), then store.kill */
	:: d_step { cst[me] == WAIT && srv != DOWN && rstate == LEADING && HOLDS && RAGE(me) + DRIFT >= STALE ->
		printf("c%d kills c%d's session: its renewal %d old as it vouches\n", me, rholder, RAGE(me));
		sess_die(rholder); rstate = KILLED; look(me) }
#endif
	CLAIM(0, 0)
	CLAIM(0, DRIFT)
	CLAIM(DRIFT, 0)
	CLAIM(DRIFT, DRIFT)

	/* Term.renew: the keepalive (store.renew), sent and executed at once ... */
	:: d_step { cst[me] == LEAD && stepped[me] == ACTING && lease[me] > 0 && ka[me] == KNONE && srv != DOWN ->
		sent_age[me] = 0;
#if GETLOCK
		if :: sess[me] == IDLE -> renew_eval(me, 0); idle[me] = 0
		   :: else -> ka[me] = R_LOST fi;
#else
		renew_eval(me, 0);
#endif
		if :: ka[me] == R_OK -> printf("c%d keepalive renews\n", me)
		   :: ka[me] == R_DEMOTED -> printf("c%d keepalive finds a demotion\n", me)
		   :: else -> printf("c%d keepalive fails\n", me) fi }
#ifdef STUCK
	/* ... or blocked on the server (a row or metadata lock): the session is busy */
	:: d_step { cst[me] == LEAD && stepped[me] == ACTING && lease[me] > 0 && ka[me] == KNONE && srv != DOWN &&
		(!GETLOCK || sess[me] == IDLE) ->
		sent_age[me] = 0; ka[me] = BLOCKED; if :: GETLOCK -> sess[me] = BUSY :: else fi;
		printf("c%d keepalive blocks on the server\n", me) }
	/* the blocked keepalive completes; renewed_at is when it began */
	:: d_step { ka[me] == BLOCKED && srv != DOWN && (!GETLOCK || sess[me] == BUSY) ->
		renew_eval(me, sent_age[me]);
		printf("c%d's blocked keepalive completes, %d ticks late\n", me, sent_age[me]);
		if
		:: cst[me] == LEAD -> if :: GETLOCK -> sess[me] = IDLE; idle[me] = 0 :: else fi
		:: else -> sess_die(me); ka[me] = KNONE; sent_age[me] = 0; term[me] = 0	/* its client had gone */
		fi }
#endif
	/* the reply arrives: Term.extend */
	:: d_step { cst[me] == LEAD && ka[me] == R_OK -> EXTEND(0); ka[me] = KNONE; sent_age[me] = 0;
		printf("c%d keepalive confirmed: lease %d\n", me, lease[me]) }
	:: d_step { cst[me] == LEAD && ka[me] == R_OK -> EXTEND(DRIFT); ka[me] = KNONE; sent_age[me] = 0;
		printf("c%d keepalive confirmed: lease %d\n", me, lease[me]) }
	/* ErrDemoted: the context is cancelled, the lock kept until Resign or the lease's end */
	:: d_step { cst[me] == LEAD && ka[me] == R_DEMOTED -> step_down(DEMOTED); ka[me] = KNONE; sent_age[me] = 0;
		printf("c%d steps down: demoted\n", me) }
	/* ErrLockLost, ErrSessionLost */
	:: d_step { cst[me] == LEAD && ka[me] == R_LOST -> step_down(LOST); ka[me] = KNONE; sent_age[me] = 0;
		printf("c%d's term is over: lost\n", me) }
	/* Term.Resign (Run: once fn has returned; also Config.Health's end, "unhealthy") */
	:: d_step { cst[me] == LEAD && stepped[me] == ACTING -> step_down(RESIGNED); printf("c%d resigns\n", me) }

#if GETLOCK
	/* pinned.release of a resignation: RELEASE_LOCK first, its end (below) after */
	:: d_step { cst[me] == LEAD && stepped[me] == RESIGNED && ka[me] != BLOCKED && srv != DOWN && sess[me] == IDLE && lockh == me ->
		lockh = NONE; printf("c%d releases the lock of term %d, its end not yet written\n", me, term[me]) }
#endif
	/* Term.finish, an end the leader chose or was asked for: pinned.release
	 * (store.endTerm, RELEASE_LOCK), leaseHold.release */
	:: d_step { cst[me] == LEAD && (stepped[me] == RESIGNED || stepped[me] == DEMOTED) && ka[me] != BLOCKED &&
		srv != DOWN && (!GETLOCK || sess[me] == IDLE) ->
		if :: epoch == tokof[term[me]] && rstate == LEADING -> rstate = GRACEFUL :: else fi;
		if :: lockh == me -> lockh = NONE :: else fi;
		printf("c%d releases term %d\n", me, term[me]);
		term_over() }
	/* Term.finish, any other end (the lease ran out, lost, a failed release): pinned.lost */
	:: d_step { cst[me] == LEAD && (stepped[me] != ACTING || lease[me] == 0) && srv != DOWN ->
		if
		:: epoch == tokof[term[me]] && rstate == LEADING ->
			if :: stepped[me] == RESIGNED || stepped[me] == DEMOTED -> rstate = GRACEFUL
			   :: else -> rstate = ENDED fi
		:: else
		fi;
		printf("c%d's term %d ends, recorded\n", me, term[me]);
		term_over() }
	/* the process dies, or the end is not written (store.owe); a process
	 * that starts again watches anew */
	:: d_step { cst[me] == LEAD -> printf("c%d's term %d ends, unrecorded\n", me, term[me]); term_over();
#ifdef CLOCKSTEP
		wstale[me] = 1; rseen[me] = 0; dseen[me] = 0; robs[me] = 0; dobs[me] = 0
#endif
		}

#ifdef FENCED
	/* Term.Fenced: BEGIN, fencedTxn.check (the epoch row LOCK IN SHARE MODE, = token), fn's writes */
	:: d_step { ACTS(me) && ftx == FNONE && srv != DOWN && EPOCH_OK -> ftx = OPEN; fc = me; fterm = term[me];
		printf("c%d opens a fenced transaction of term %d\n", me, fterm) }
	/* the COMMIT, sent only while the term lasts (IsLeader) */
	:: d_step { ftx == OPEN && fc == me && COMMIT_OK -> ftx = SENT; printf("c%d sends the COMMIT\n", me) }
#endif
#ifdef DOWNSTREAM
#ifdef INFLIGHT
	/* a downstream write with Term.Token (Term.SetToken), sent ... */
	:: d_step { ACTS(me) && !dmsg -> dmsg = 1; dterm = term[me]; printf("c%d sends a write of term %d\n", me, dterm) }
#endif
	/* ... or made at once: Fence.Check admits a token not below the highest it admitted */
	:: d_step { ACTS(me) && tokof[term[me]] >= tokof[fhw] ->
		printf("the Fence admits a write of term %d, token %d\n", term[me], tokof[term[me]]);
		assert(term[me] >= fhw);	/* P2 */
		fhw = term[me] }
#endif
	od
}

/* The primary dies: every session and open transaction with it. */
inline failover() {
	nfail = 1; srv = DOWN; fo_left = F;
	if :: cst[0] == LEAD -> cut[0] = 1 :: else fi;
	if :: cst[1] == LEAD -> cut[1] = 1 :: else fi;
#if GETLOCK
	sess_die(0); sess_die(1);
#else
	if :: ka[0] == BLOCKED -> ka[0] = KNONE; sent_age[0] = 0 :: else fi;
	if :: ka[1] == BLOCKED -> ka[1] = KNONE; sent_age[1] = 0 :: else fi;
#endif
	ftx = FNONE; fc = 0; fterm = 0; prev_epoch = 0; prev_dbhw = 0;
	/* the replica's record: whatever it says, the model takes it as free */
	rholder = NONE; rstate = FREE; rlive = 0; renew_age = AGECAP; NEW_RENEWAL();
	demoted = 0; demote_age = 0; NEW_DEMOTION(); handover = 0; hto = 0; lockh = NONE;
#ifdef CLOCKSTEP
	wstale[0] = 1; wstale[1] = 1;   /* another server's clock */
#endif
#ifndef NO_CARRY_LOCK_DELAY
	rdelay = 0;
#endif
}

/* The rest of the world: the database, the downstream store, an operator, faults. */
proctype Env() {
	do
#ifdef FENCED
	/* a ROLLBACK: fn failed, the term is over, the session was dropped or killed */
	:: d_step { ftx == OPEN -> ftx = FNONE; fc = 0; fterm = 0 }
	/* the COMMIT arrives: P2 in the database ... */
	:: d_step { ftx == SENT && srv != DOWN ->
		printf("the database commits a fenced write of term %d\n", fterm);
		assert(fterm >= dbhw);	/* P2 */
		dbhw = fterm; ftx = FNONE; fc = 0; fterm = 0 }
	/* ... or is lost: the session was dropped (its wait_timeout, keptSession) or killed */
	:: d_step { ftx == SENT -> ftx = FNONE; fc = 0; fterm = 0 }
#endif
#ifdef DOWNSTREAM
	/* the write arrives: Fence.Check */
	:: d_step { dmsg ->
		if
		:: tokof[dterm] >= tokof[fhw] ->
			printf("the Fence admits a write of term %d, token %d\n", dterm, tokof[dterm]);
			assert(dterm >= fhw);	/* P2 */
			fhw = dterm
		:: else
		fi;
		dmsg = 0; dterm = 0 }
#endif
#if GETLOCK
#ifndef NO_WAIT_TIMEOUT
	/* wait_timeout: the server drops a session idle for W */
	:: d_step { sess[0] == IDLE && idle[0] >= W -> printf("the server drops c0's idle session\n"); sess_die(0) }
	:: d_step { sess[1] == IDLE && idle[1] >= W -> printf("the server drops c1's idle session\n"); sess_die(1) }
#endif
	/* pinned.contend, Operator.demote: Record.overdue on a read with IS_USED_LOCK,
	 * then store.kill (KILL CONNECTION, endTerm); with CLOCKSTEP the
	 * deputy's kill of a hung leader is its own (Cand), and a demotion is
	 * as old as its requester's clock says, or older than the deputy's */
#ifdef CLOCKSTEP
#define HUNG 0
#else
#define HUNG (renew_age >= STALE)
#endif
	:: d_step { srv != DOWN && rstate == LEADING && HOLDS &&
		(HUNG || demoted && demote_age >= DSTALE) ->
		printf("c%d's session killed: renewed %d ago, demoted %d ago\n", rholder, renew_age, demote_age);
		sess_die(rholder); rstate = KILLED }
#ifdef SESSION_LEASE
	/* the keepalive of the session's other terms renews the lease: a
	 * statement on the holder's session, which runs only while it lives and
	 * is not blocked, and keeps it from idling out */
	:: d_step { srv != DOWN && rstate == LEADING && rlive && sess[rholder] == IDLE ->
		renew_age = 0; NEW_RENEWAL(); idle[rholder] = 0;
		printf("c%d's session renews its lease for its other terms\n", rholder) }
#endif
#ifdef EXTKILL
	/* a KILL from outside, a proxy's reset: the documented window */
	:: d_step { !nkill && cst[0] == LEAD && sess[0] != DEAD -> nkill = 1; cut[0] = EXCUSED(0); sess_die(0);
		printf("c0's session killed from outside\n") }
	:: d_step { !nkill && cst[1] == LEAD && sess[1] != DEAD -> nkill = 1; cut[1] = EXCUSED(1); sess_die(1);
		printf("c1's session killed from outside\n") }
#endif
#endif
#if defined(DEMOTE) || defined(PREFER)
#ifdef PREFER
	/* Term.prefer asks through store.request too, whose UPDATE for a policy
	 * wants the record leading and no request pending: here any number of
	 * times, at any moment, even over a pending demotion (which it then
	 * restarts), a superset of Term.prefer (at most once a term, while
	 * IsLeader) and of the operator's */
#define REQUESTED (srv != DOWN && rstate == LEADING)
#else
	/* Operator.Demote, Operator.Handover: store.request, on a record that is Leading */
#define REQUESTED (!ndemote && srv != DOWN && rstate == LEADING && renew_age < STALE && HOLDS)
#endif
	:: d_step { REQUESTED ->
		ndemote = 1; demoted = 1; demote_age = 0; NEW_DEMOTION(); printf("c%d is asked to step down\n", rholder) }
	:: d_step { REQUESTED ->
		ndemote = 1; demoted = 1; demote_age = 0; NEW_DEMOTION(); handover = 1; hto = 1 - rholder;
		printf("c%d is asked to hand over\n", rholder) }
#endif
#ifdef FAILOVER
	/* the primary dies; the replica, promoted F ticks later, has every commit ... */
	:: d_step { !nfail && srv == UP_A -> failover(); printf("the primary dies; the replica has it all\n") }
	/* ... or lacks the last bump and all that followed */
	:: d_step { !nfail && srv == UP_A && gterm > 0 -> epoch = prev_epoch; dbhw = prev_dbhw; lostbump = 1; failover();
		printf("the primary dies; the replica lacks the last bump\n") }
#endif
#ifdef CLOCKSTEP
	/* the server's clock steps, forward or back: every watcher starts a
	 * new run at its next read; ages on the server's clock jump */
	:: d_step { !(wstale[0] && wstale[1]) ->
		wstale[0] = 1; wstale[1] = 1;
#ifdef SRVCLOCK
		rfwd = 1; dfwd = 1; dlfwd = 1;
#endif
		printf("the server's clock steps\n") }
#endif
	:: (0) -> skip	/* (no empty loop) */
	od
}

inline tick(c) {
#ifdef CLOCKSTEP
	if :: rseen[c] && robs[c] < AGECAP -> robs[c]++ :: else fi;
	if :: dseen[c] && demoted && rstate == LEADING && dobs[c] < AGECAP -> dobs[c]++ :: else fi;
#endif
	if :: lease[c] > 0 -> lease[c]-- :: else fi;
	if :: delay[c] > 0 -> delay[c]-- :: else fi;
	if :: (cst[c] == START || ka[c] != KNONE) && sent_age[c] < AGECAP -> sent_age[c]++ :: else fi;
	if :: sess[c] == IDLE && idle[c] < W -> idle[c]++ :: else fi
}

/* Time: a tick of every clock (local timers drift by dl, dd above). Ages
 * that no rule reads are kept saturated, or at 0. */
proctype Clock() {
	do
	:: d_step {
		tick(0); tick(1);
		if :: renew_age < AGECAP && (rstate == LEADING || (rstate == KILLED || demoted) && rstate != GRACEFUL) -> renew_age++
		   :: else -> renew_age = AGECAP fi;
		if :: demoted && rstate == LEADING && demote_age < AGECAP -> demote_age++
		   :: demoted && rstate == LEADING -> skip
		   :: else -> demote_age = 0 fi;
#ifdef FAILOVER
		if :: since_bump <= K -> since_bump++ :: else fi;
		if :: srv == UP_B && !lostbump -> since_bump = K+1 :: else fi;
#endif
#ifndef NO_CARRY_LOCK_DELAY
		if :: rdelay > 0 -> rdelay-- :: else fi;
#endif
		if :: srv == DOWN -> fo_left--; if :: fo_left == 0 -> srv = UP_B :: else fi :: else fi;
		printf("tick\n");
		P3() }
	od
}

init {
	atomic {
#if !GETLOCK
		cst[0] = WAIT; cst[1] = WAIT;
#endif
#ifdef CLOCKSTEP
		wstale[0] = 1; wstale[1] = 1;   /* a waiter starts watching late */
#endif
		run Clock(); run Env(); run Cand(0); run Cand(1)
	}
}
