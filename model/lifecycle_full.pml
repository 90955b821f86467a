/*
 * lifecycle_full.pml: lifecycle.pml with the paths it abstracts: the last look as a delivery
 * of its own (lost, stalled, failing, fenced, raced by a new run), repeated Redis loss in a
 * backlog, the record step's give-up with a held result, and the call fence (model/README.md,
 * "The full lifecycle model"). Every path of both models is here, behind a switch; too many
 * at once do not fit a search (23 million states and more), so each search of `make model`
 * enables one new path, with one worker that may crash, and leaves the shutdown, the failed
 * record transaction and a live worker's lock loss to lifecycle.pml's searches.
 *
 * As lifecycle.pml: the delivery protocol from a committed outbox event to the external side
 * effect it asks for, for one task (README.md maps every [tag] below to the file and function
 * it stands for). outbox.pml checks the outbox half; here the Outbox process does only what
 * that model proves.
 *
 * Actors:
 *   Outbox      the outbox's contract (outbox.pml): an event is marked dispatched only after
 *               its job was added; while owed it may add the job again (at most MAX_ATTEMPTS
 *               deliveries); it ends dispatched or dead_letter.
 *   Worker      a BullMQ worker running the task lifecycle (2): take the job under a lock,
 *               begin CAS, the external call outside any transaction, record CAS, and the
 *               error policy: retry, snooze on Retry-After (no attempt spent), final failure
 *               on the last attempt. Each may crash once, at any step, and restart.
 *   Env         the environment, and the actors that are one atomic step each:
 *               the gateway (TASK 0, a publication: marketplace with a lookup by external_ref)
 *               or the AI provider (TASK 1: no lookup), honouring Idempotency-Key or ignoring
 *               it; the clock; Redis restarting (losing its data, or keeping it); the end of a
 *               finished job's retention / de: key; BullMQ's stalled check; the reconciler,
 *               which re-delivers a quiet unfinished task through the outbox under a new
 *               event/job id, then fails it with DELIVERY_EXHAUSTED after RMAX.
 *   (Committer) the command transaction (task row and request event) is committed in init.
 *
 * Atomicity: every DB transaction and every Redis script is one atomic step; a process crashes
 * only between steps (a crash inside a transaction is a rollback, i.e. a crash before it). A
 * worker's crash is an alternative of its next step ("crash before the step"), so that the
 * choice adds no state of its own. Two of the worker's steps are joined: the lookup by
 * external_ref and the call it leads to (and the lookup after a failed call and the retry or
 * failure it leads to). Nothing a lookup reads (products) is written by any step that could
 * run between the two except a call landing, and a landing commutes with the second step,
 * which neither reads nor writes what the landing reads or writes: every state and every
 * assertion of the split steps is reached by the joined ones.
 *
 * Time. Only one ordering needs a clock: a worker that dies with its call in flight leaves two
 * things running down, its job's lock (LOCK_LEFT ticks: at worst LockDuration minus the
 * renewal period) and its call (CALL_TO ticks: the call's time-out; a call lands within its
 * time-out or never). Env's tick decrements both. Every other expiry is an event that may
 * happen at any moment, which is the most permissive choice: a live worker's call time-out,
 * the end of a finished job's retention / de: key TTL. A live worker's lock does not run out
 * (it is renewed every LockDuration/2); Redis losing its data takes every lock at once.
 *
 * Bounded configuration: one task (TASK), 2 event slots (the request, the reconciler's
 * redeliveries and the last looks; jobId = event id), the Outbox contract, 2 workers of which
 * CRASHERS may each crash once and restart, REDIS Redis restarts (keeping or losing the data;
 * with REDIS_BUSY 0 only in a backlog), one Retry-After (SNOOZES), and the switches below.
 *
 * State that no step reads any more is reset (a finished job's counters, a delivered event's
 * attempts, a call's job once it is over), and a ghost is kept only where an assertion reads
 * it, so that states differing only there are one.
 */

/* ---- configuration (check.sh passes -D to change) --------------------------------------- */
#ifndef HONOUR
#define HONOUR 1        /* 1: gateway and provider honour Idempotency-Key; 0: they ignore it */
#endif
#ifndef CALL_TO
#define CALL_TO 1       /* the call's time-out, ticks */
#endif
#ifndef LOCK_LEFT
#define LOCK_LEFT 1     /* least lock left on the job of a worker that just died, ticks */
#endif
#ifndef STRICT
#define STRICT 0        /* 1: property 4 without its exception (a lock lost while in flight) */
#endif
#ifndef AI_ONCE
#define AI_ONCE 0       /* 1: property 4 for the AI task as "one billed run" (see README) */
#endif
#ifndef TASK
#define TASK 0          /* the task committed: 0 the publication, 1 the AI task */
#endif
#ifndef LOSSES
#define LOSSES (!STRICT) /* live workers' lock losses (renewals failed): the property 4 searches
                            without it (STRICT) leave it out, a search of its own shows what
                            remains with it */
#endif
#ifndef FENCE
#define FENCE 1         /* [W-fence] the call fence (Flow.CallTimeout); 0: the model before it */
#endif
#ifndef REDIS
#define REDIS 1         /* Redis restarts (each losing the data or keeping it) */
#endif
#ifndef REDIS_BUSY
#define REDIS_BUSY 1    /* 0: Redis restarts only in a backlog (no worker on a job, no call in
                           flight); a restart with a worker on a job is lifecycle.pml's path */
#endif
#ifndef STOPS
#define STOPS 1         /* shutdowns (SIGTERM) of a worker holding a job */
#endif
#ifndef RECFAILS
#define RECFAILS 1      /* record transactions that fail after a successful call (then retried) */
#endif
#ifndef GIVEUPS
#define GIVEUPS 1       /* record steps that give up after their retries ([W-giveup]) */
#endif
#ifndef LOOKFAILS
#define LOOKFAILS 1     /* last looks whose upstream request fails ([L-fail]) */
#endif
#ifndef CRASHERS
#define CRASHERS NW     /* workers that may crash (once each): the searches of one new path let
                           one crash (worker 0's; the workers are alike) */
#endif
#ifndef SNOOZES
#define SNOOZES 1       /* snoozes: a Retry-After answer, or a held result on the last attempt */
#endif
#ifndef MAXFREE
#define MAXFREE 1       /* free redeliveries (of a task that did not run, of a last look) that fit
                           in TASK_MAX_AGE: past them the task is too old ([E-age]) */
#endif
#ifndef DEADS
#define DEADS 1         /* events the outbox dead-letters */
#endif
#define MAX_ATTEMPTS 2  /* OUTBOX_MAX_ATTEMPTS */
#define JOB_ATTEMPTS 2  /* JOB_ATTEMPTS */
#define MAX_STALLS   1  /* JOB_MAX_STALLS */
#define RMAX         1  /* RECONCILE_MAX */

#define NE 2            /* event slots = job ids */
#define NW 2            /* workers */
#define PUB 0           /* TASK 0: publication (marketplace gateway) */
#define AI  1           /* TASK 1: AI task (AI provider) */

#if TASK == PUB && !defined(MUT_NO_LASTLOOK)
#define LASTLOOK 1      /* [W-lastlook] a last look before any final failure */
#else
#define LASTLOOK 0
#endif
#ifdef MUT_NO_RECORD_CAS
#define RECORDABLE (tSt != T_SUCCEEDED)   /* the record step writes over a failed task */
#else
#define RECORDABLE (!TERMINAL)            /* [W-record] compare-and-set */
#endif
#if TASK == PUB && !defined(MUT_NO_LOOKUP)
#define LOOKUP 1        /* [W-lookup] the worker looks the product up by external_ref */
#else
#define LOOKUP 0
#endif
#define HOLDS (TASK == AI) /* the flow keeps a held result (Flow.Hold): the AI task does; a
                              publication's next delivery finds its product by external_ref */
/* ghosts: lostByRedis is read by property 4's exception; lostByExpiry too unless STRICT */
#define GHOST_REDIS 1
#define GHOST_EXPIRY (!STRICT)

/* ---- state ------------------------------------------------------------------------------ */
/* the task row (publications / ai_tasks) */
#define T_PENDING 1
#define T_RUNNING 2
#define T_SUCCEEDED 3
#define T_FAILED 4
#define TERMINAL (tSt >= T_SUCCEEDED)
byte tSt;
byte recon;             /* Reconciliations: redeliveries of a task that ran (they spend a try) */
byte redel;             /* Redeliveries: free ones (not run since, or a look asked again) */
bool tRan;              /* Attempts != ReconciledAttempts: the handler started since the task
                           was last delivered again */
bool everRan;           /* Attempts > 0 */
bool held;              /* HeldResult: a successful call's result, kept when the record step gave up */
bool lookAsked;         /* Look.Asked: a last look was asked before a final failure */
#define L_NONE 0
#define L_NOTDONE 1
#define L_DONE 2
byte lookFound;         /* Look.Found: what the look completed since it was asked found */
byte fenceTok;          /* CallDeadline not passed: the token of the run that set it; 0 = none */
#define F_PLAIN 1       /* the held failure (DELIVERY_EXHAUSTED, JOB_STALLED, the handler's) */
#define F_UNRUN 2       /* DELIVERY_EXHAUSTED of a task whose handler never ran, too old */
#define F_UNKNOWN 3     /* OUTCOME_UNKNOWN: no look completed before TASK_MAX_AGE */
byte tCode;             /* the failure's code (property 6, 9, 10) */
byte ledger;            /* ai_ledger rows of the task */
#define AGED (redel >= MAXFREE)   /* [E-age] TASK_MAX_AGE has passed */

/* outbox_events */
#define EV_NONE 0
#define EV_PENDING 1
#define EV_DISPATCHED 3
#define EV_DEAD 4
byte obSt[NE];
byte obAtt[NE];         /* attempt_count (reset once the event is delivered: no step reads it) */
bool evLook[NE];        /* the event is a last look (domain.LastLookRequested), else the request */

/* BullMQ: one job per event, jobId = event id */
#define J_NONE 0        /* no job hash (never added, retention over, or lost) */
#define J_WAIT 1        /* wait (or delayed) */
#define J_ACTIVE 2
#define J_DONE 3        /* completed or failed, hash and de: key kept: duplicates ignored */
#define J_FENCED 4      /* delayed until the task's call fence has passed (a wait: no attempt) */
byte jSt[NE];
byte jOwner[NE];        /* <job>:lock: the holder's token, 0 = no lock */
byte jLockT[NE];        /* ticks left on the lock of a dead holder */
byte jStc[NE];          /* stc: stalls */
byte jAtm[NE];          /* attemptsMade */
bool jDefa[NE];         /* defa: the job fails when next taken */

/* the external system */
byte effects;           /* platform products carrying the task's external_ref (TASK 0), or
                           model runs the AI provider billed for the task (TASK 1) */
bool keyUsed;           /* the gateway has seen the task's Idempotency-Key */

/* workers and their calls */
#define C_NONE 0
#define C_SENT 1        /* in flight: may still land */
#define C_LANDED 2      /* the gateway applied it; the reply is on its way */
byte wInc[NW];          /* incarnation = crashes so far */
bool wDown[NW];         /* dead, not restarted yet */
byte wJob[NW];          /* job being handled, NE = none */
byte cSt[NW];
byte cTimer[NW];        /* ticks left of an orphaned call (its worker died) */
#if GHOST_EXPIRY
byte cJob[NW];          /* the job of a call in flight */
#endif

byte snoozes = SNOOZES;       /* snoozes left: a Retry-After answer, or a held result on the last attempt */
byte redisRestarts = REDIS;
byte lockLosses = LOSSES; /* a live worker's lock lost: renewals failed until it may have run out */
byte stops = STOPS;     /* a worker stopped (SIGTERM) while it holds a job */
byte recFails = RECFAILS; /* a record transaction fails (the database, a deadlock) */
byte giveUps = GIVEUPS; /* a record step gives up after its retries */
byte lookFails = LOOKFAILS; /* a last look's upstream request fails */
byte deads = DEADS;     /* an event dead-lettered */
byte ne;                /* scratch of NEWEV, 0 between steps */
#define LK_ABSENT 1     /* a last look found the work absent (lk) */
#define LK_FOUND 2      /* found it */
#define LK_RUN 3        /* found it absent, but a delivery started the task since the look read it */
byte lk[NW];            /* what worker w's last look found, between its lookup and its record */

/* ghosts: observation only */
bool added[NE];         /* a job was added for the owed event */
#if GHOST_EXPIRY
bool lostByExpiry;      /* a job's lock ran out while its holder's call was in flight */
#endif
#if GHOST_REDIS
bool lostByRedis;       /* Redis lost a job while a worker was on it or its call in flight */
#endif
bool gaveUp;            /* a record step gave up after a successful call (property 8) */

#define W_ALIVE(tok) (wInc[((tok) - 1) % NW] == ((tok) - 1) / NW && !wDown[((tok) - 1) % NW])

/* ---- properties ------------------------------------------------------------------------- */
#if STRICT
#define EXCUSED (lostByRedis)
#else
#define EXCUSED (lostByRedis || lostByExpiry)
#endif

#define EVDONE(e) (obSt[e] == EV_NONE || obSt[e] >= EV_DISPATCHED)
#define evdone (EVDONE(0) && EVDONE(1))
#define tasksdone (TERMINAL)

/* 1: every committed event is eventually dispatched or dead-lettered (no loss) */
ltl p1 { <> [] evdone }
/* 2: the committed (so the dispatched) task eventually reaches a terminal state */
ltl p2 { <> [] tasksdone }
/* 3, 4, 8 are assertions in LAND, SEND and [W-record] (ledger); 5 is the Outbox contract's;
   6, 7, 9, 10 assertions in FAILTASK and [W-record]. */

/* ---- BullMQ scripts --------------------------------------------------------------------- */
/* [Q-add] addScript: nothing written while the job hash or its de: key exists */
inline ADD(e) {
#ifdef MUT_NO_DEDUP
  jSt[e] = J_WAIT; jOwner[e] = 0; jLockT[e] = 0; jStc[e] = 0; jAtm[e] = 0; jDefa[e] = 0;
#else
  if
  :: jSt[e] != J_NONE -> skip
  :: else -> jSt[e] = J_WAIT; jStc[e] = 0; jAtm[e] = 0; jDefa[e] = 0
  fi;
#endif
  added[e] = 1
}

/* [Q-finish] finishScript, token checked: complete/fail (kind 0), retry (1), hand back or
   snooze (2), wait for the call fence (3: delayed, no attempt). A finished job's counters are
   read by no step any more: they are reset. */
inline FINISH(j, kind, tk) {
  if
  :: jSt[j] == J_ACTIVE && jOwner[j] == tk ->
     if
     :: kind == 0 -> jSt[j] = J_DONE; jOwner[j] = 0; jStc[j] = 0; jAtm[j] = 0; jDefa[j] = 0
     :: kind == 1 -> jSt[j] = J_WAIT; jOwner[j] = 0; jAtm[j]++
     :: kind == 2 -> jSt[j] = J_WAIT; jOwner[j] = 0
     :: kind == 3 -> jSt[j] = J_FENCED; jOwner[j] = 0
     :: REDIS_BUSY && redisRestarts > 0 -> redisRestarts--; jOwner[j] = 0
        /* [E-redis-keep] Redis restarts keeping its data while the finish is sent: the
           finish is lost; the worker, done with the job, no longer renews its lock, which runs
           out (no call in flight): the job is active without a lock, for the stalled check */
     fi
  :: else -> skip   /* the lock is gone: another worker may hold the job */
  fi;
  wJob[w] = NE; j = 0
}

/* [T-fail] FailTask with code c: compare-and-set; a finished task is left alone. An AI task's
   failure records its ledger row in the same transaction (insert or nothing). */
inline FAILTASK(c) {
  if
  :: !TERMINAL ->
     tSt = T_FAILED; tCode = c; held = 0;
     /* 6: a publication never fails while the platform holds its product (OUTCOME_UNKNOWN
        says it may) */
     assert(TASK == AI || effects == 0 || c == F_UNKNOWN || EXCUSED);
     /* 9: a task whose handler never ran is never failed before TASK_MAX_AGE (not even when
        its job stalled past JOB_MAX_STALLS: the workers died on it before it began) */
     assert(everRan || AGED);
     /* 10: no final failure of a started publication before a last look completed and found
        the work absent; OUTCOME_UNKNOWN only when none could complete before TASK_MAX_AGE */
     assert(TASK == AI || !everRan || (c == F_PLAIN && lookFound == L_NOTDONE) ||
            (c == F_UNKNOWN && AGED && lookFound == L_NONE));
     if :: TASK == AI && ledger == 0 -> ledger = 1 :: else -> skip fi
  :: else -> skip
  fi
}

#define OWED(e) (obSt[e] == EV_PENDING)
#define LIVE(e) (jSt[e] == J_WAIT || jSt[e] == J_ACTIVE || jSt[e] == J_FENCED)
#define LOOKON(e) (evLook[e] && (LIVE(e) || OWED(e) || wJob[0] == e || wJob[1] == e))

/* [E-new] a new outbox event (the reconciler's redelivery, a last look: a new event id, so a
   new job id) in a slot whose event and job are over and that no worker holds; a slot's old
   job, finished, is forgotten (its id is not the new one) */
#define FREE(e) ((obSt[e] == EV_NONE || obSt[e] >= EV_DISPATCHED) && (jSt[e] == J_NONE || jSt[e] == J_DONE) && \
                 wJob[0] != e && wJob[1] != e)
inline NEWEV(k) {
  if
  :: FREE(0) -> ne = 0
  :: !FREE(0) && FREE(1) -> ne = 1
  :: else -> ne = NE
  fi;
  if
  :: ne < NE ->
     obSt[ne] = EV_PENDING; obAtt[ne] = 0; added[ne] = 0; evLook[ne] = k;
     jSt[ne] = J_NONE; jOwner[ne] = 0; jLockT[ne] = 0; jStc[ne] = 0; jAtm[ne] = 0; jDefa[ne] = 0
  :: else ->
     /* the model's bound, 2 slots: none is free only when a last look is asked again while
        the one asked before is still under way (its event owed, its job live, or a worker on
        it, its job lost with Redis); that look, not yet recorded, does what the new one
        would, so the new one is left out (and should that one end without a record, the task
        is stuck and the reconciler asks again) */
     assert(k && (LOOKON(0) || LOOKON(1)))
  fi;
  ne = 0
}

/* [W-asklook] RequestLastLook: unless finished, the task records the look asked for (what an
   earlier look found is forgotten) and a last look event is published */
inline REQUESTLOOK() {
  if
  :: !TERMINAL -> lookAsked = 1; lookFound = L_NONE; NEWEV(1)
  :: else -> skip
  fi
}

/* the final failure where the code would record one: a flow that asks a last look asks it */
inline FINALFAIL() {
#if LASTLOOK
  REQUESTLOOK()
#else
  FAILTASK(F_PLAIN)
#endif
}

/* [W-abandon] Kind.Abandon of job j (stalled past the limit): a last look records the held
   failure only if a look completed and found the work absent; a request of a task that never
   started records nothing (the reconciler delivers it again for free, as a lost job's); else
   it asks its last look */
#ifndef MUT_STALL_FAILS_UNRUN
#define UNRUN_LEFT :: !evLook[j] && !everRan -> skip
#else
#define UNRUN_LEFT :: false   /* mutant: a task that never started is failed (or looked at) too */
#endif
inline ABANDON(j) {
#if LASTLOOK
  if
  :: evLook[j] ->
#ifdef MUT_BLIND_FAIL
     FAILTASK(F_PLAIN)   /* mutant: the stalled look records the held failure blind */
#else
     if :: lookFound == L_NOTDONE -> FAILTASK(F_PLAIN) :: else -> skip fi
#endif
  UNRUN_LEFT
  :: else -> REQUESTLOOK()
  fi
#else
  if
  UNRUN_LEFT
  :: else -> FAILTASK(F_PLAIN)
  fi
#endif
}

/* ---- actors ----------------------------------------------------------------------------- */

/* [O] The outbox, as outbox.pml proves it behaves (its contract): an event is marked
   dispatched only after its job was added (property 5); while it is owed (pending) its job may
   be added again (a lease that ran out, a lost reply: at most MAX_ATTEMPTS deliveries); it
   ends dispatched or dead_letter (property 1), with or without a job added. */
#define OWEDP(e) (obSt[e] == EV_PENDING)
#define CANADD(e) (OWEDP(e) && obAtt[e] < MAX_ATTEMPTS)
#define DELIVERED(e) obAtt[e] = 0; added[e] = 0
proctype Outbox() {
  byte e;
end:
  do
  :: /* [O-publish] a delivery: [D-claim] + [D-publish] (addScript, deduplicated) */
     atomic { (CANADD(0) || CANADD(1)) ->
       if :: CANADD(0) -> e = 0 :: CANADD(1) -> e = 1 fi;
       ADD(e); obAtt[e]++; e = 0 }
  :: /* [O-mark] [D-mark] dispatched, only after an add */
     atomic { ((OWEDP(0) && added[0]) || (OWEDP(1) && added[1])) ->
       if :: OWEDP(0) && added[0] -> e = 0 :: OWEDP(1) && added[1] -> e = 1 fi;
       obSt[e] = EV_DISPATCHED; DELIVERED(e); e = 0 }
  :: /* [O-dead] dead_letter (bounded: DEADS) */
     atomic { deads > 0 && (OWEDP(0) || OWEDP(1)) -> deads--;
       if :: OWEDP(0) -> e = 0 :: OWEDP(1) -> e = 1 fi;
       obSt[e] = EV_DEAD; DELIVERED(e); e = 0 }
  od
}

/* [W-fence] the call fence (domain.Task.Fenced). Time is not modelled, only what it orders:
   the call of the run that set the fence is over before its deadline passes (it runs under
   it), and a delivery delayed by the fence is taken again after the deadline passed. So a
   delivery that finds the fence set waits while that run's call is in flight; once it is
   over, the deadline may have passed (the delivery proceeds and the fence is gone) or not
   (it waits); a delivery that waited proceeds. */
#if FENCE
#define FENCED (tSt == T_RUNNING && fenceTok != 0)
#define FENCECALL (FENCED && cSt[(fenceTok - 1) % NW] == C_SENT)   /* its call in flight */
#else
#define FENCED false
#define FENCECALL false
#endif
#define WAITING(j) (jSt[j] == J_WAIT || (jSt[j] == J_FENCED && !FENCECALL))
#define CRASH inc == 0 && w < CRASHERS -> goto crash
#define OTHER_IN_FLIGHT (cSt[1 - w] == C_SENT)
#if GHOST_EXPIRY
#define SENDIT cSt[w] = C_SENT; cJob[w] = j
#else
#define SENDIT cSt[w] = C_SENT
#endif
/* [W-call] the call, under the run's deadline: sent only while the run's fence holds (a run
   whose deadline passed before it sent fails at once, nothing sent). Property 8: no call
   after a give-up (the result is held, or found by external_ref), and none while another
   call for the task may still land (the fence) */
#if FENCE
#define SEND(ok) if \
  :: fenceTok == tok -> assert(!OTHER_IN_FLIGHT); assert(!gaveUp || lostByRedis); SENDIT; ok = 1 \
  :: else -> ok = 0 \
  fi
#else
#define SEND(ok) SENDIT; ok = 1
#endif

/* a run starts: a last look that read the task before it no longer records its failure */
#ifndef MUT_LOOK_NO_RUN_CHECK
#define STARTED if :: lk[0] == LK_ABSENT -> lk[0] = LK_RUN :: else -> skip fi; \
                if :: lk[1] == LK_ABSENT -> lk[1] = LK_RUN :: else -> skip fi
#else
#define STARTED skip
#endif

/* [W] A BullMQ worker running the task lifecycle. */
#define tok (w + 1 + NW * inc)   /* this process's lock token */
proctype Worker(byte w) {
  byte j, inc;   /* j: the job handled; inc: crashes so far */
  bool ok;       /* scratch: the call was sent */
end:
  /* [Q-take] takeScript: a waiting job moves to active under this worker's lock (a job
     delayed by the fence is waiting once the fence passed) */
  atomic {
    (WAITING(0) || WAITING(1));
    if :: WAITING(0) -> j = 0 :: WAITING(1) -> j = 1 fi;
#if FENCE
    if :: jSt[j] == J_FENCED -> fenceTok = 0 :: else -> skip fi;   /* waited past the deadline */
#endif
    jSt[j] = J_ACTIVE; jOwner[j] = tok; wJob[w] = j
  };
  if
  :: CRASH
  :: /* [W-stop] SIGTERM before the handler started: the job is handed back at once (no
        attempt spent); a started job is finished first (its call ended and recorded, its
        lock renewed meanwhile), and one cut short past the stop bound is left to its lock
        like a crash's ([W-crash]) */
     atomic { stops > 0 -> stops--; FINISH(j, 2, tok) };
     goto end
  :: /* [W-abandon] stalled too often: JOB_STALLED, or its last look asked; then the job */
     atomic { jDefa[j] -> ABANDON(j) };
     goto complete
  :: atomic { !jDefa[j] && evLook[j] }; goto look
  :: /* [W-begin] step A, begin CAS: a finished task is skipped (the job completes); a held
        result is recorded without a call; a task running before its call deadline waits
        ([W-fence]: delayed, no attempt spent); else the task starts (one more attempt) and
        its fence is set */
     atomic { !jDefa[j] && !evLook[j] ->
#ifndef MUT_NO_BEGIN_CAS
       if :: TERMINAL -> goto complete :: else -> skip fi;
#endif
#if HOLDS && !defined(MUT_NO_HELD_CHECK)
       if :: held && !TERMINAL -> goto record :: else -> skip fi;
#endif
#if FENCE && !defined(MUT_NO_FENCE)
       if
       :: FENCECALL -> FINISH(j, 3, tok); goto end
       :: FENCED && !FENCECALL -> FINISH(j, 3, tok); goto end   /* before the deadline */
       :: FENCED && !FENCECALL -> fenceTok = 0                  /* after it */
       :: else -> skip
       fi;
#endif
#if FENCE
       if :: !TERMINAL -> tSt = T_RUNNING; tRan = 1; everRan = 1; fenceTok = tok; STARTED :: else -> skip fi
#else
       if :: !TERMINAL -> tSt = T_RUNNING; tRan = 1; everRan = 1; STARTED :: else -> skip fi
#endif
     }
  fi;
  /* [W-lost] renewals fail until the lock may have run out: the lock is gone (the stalled
     check may hand the job to another worker) and the handler's context is cancelled: it
     makes no further call and records nothing */
  if
  :: skip
  :: atomic { lockLosses > 0 && jOwner[j] == tok -> lockLosses--; jOwner[j] = 0 };
#ifndef MUT_NO_LOSS_CANCEL
     goto lost
#else
     skip   /* mutant: the handler goes on after the loss */
#endif
  fi;
  /* [W-lookup] FindProductByExternalRef before the create; [W-call] the external call,
     outside any transaction, Idempotency-Key = the task id */
  if
  :: CRASH
#if LOOKUP
  :: atomic { effects > 0 }; goto record
  :: atomic { effects == 0 -> SEND(ok) }
#else
  :: atomic { SEND(ok) }
#endif
  fi;
  if :: ok -> ok = 0 :: else -> goto failed fi;   /* its deadline passed: nothing sent */
callwait:
  if
  :: CRASH
  :: /* [W-lost] the lock is lost while the call is in flight: the call is cancelled
        client-side but cannot be recalled (it may still land within its time-out); the
        worker records nothing and waits for it to be over */
     atomic { cSt[w] == C_SENT && lockLosses > 0 && jOwner[j] == tok -> lockLosses--; jOwner[j] = 0;
#if GHOST_EXPIRY
       lostByExpiry = 1;
#endif
       skip };
#ifndef MUT_NO_LOSS_CANCEL
     goto lost
#else
     goto callwait   /* mutant: the handler goes on waiting for its reply */
#endif
#ifdef MUT_HANDBACK_IN_FLIGHT
  :: /* mutant: SIGTERM hands the job back while its call is in flight, and the process
        exits leaving the call to land or time out */
     atomic { cSt[w] == C_SENT && stops > 0 -> stops--; FINISH(j, 2, tok); wJob[w] = NE };
     goto crash
#endif
  :: atomic { cSt[w] == C_LANDED -> cSt[w] = C_NONE }; goto record                /* reply */
  :: atomic { cSt[w] == C_LANDED -> cSt[w] = C_NONE }; goto failed                /* reply lost */
  :: atomic { cSt[w] == C_SENT -> cSt[w] = C_NONE }; goto failed                  /* time-out */
  :: atomic { cSt[w] == C_SENT && snoozes > 0 -> snoozes--; cSt[w] = C_NONE };     /* Retry-After */
     /* [W-snooze] 429 Retry-After: back to the queue without spending an attempt */
     atomic { FINISH(j, 2, tok) };
     goto end
  fi;
failed:
  /* [W-retry] outcome unknown: the publication looks once more; then retry, or, on the last
     attempt, the final failure (a publication asks its last look) */
  if
#if LOOKUP
  :: atomic { effects > 0 }; goto record
#define NOTFOUND effects == 0 &&
#else
#define NOTFOUND
#endif
  :: atomic { NOTFOUND jAtm[j] + 1 < JOB_ATTEMPTS -> FINISH(j, 1, tok) }; goto end
  :: atomic { NOTFOUND jAtm[j] + 1 >= JOB_ATTEMPTS -> FINALFAIL() }   /* [W-fail] */
  fi;
  /* then the job fails */
  if
  :: CRASH
  :: atomic { FINISH(j, 0, tok) }; goto end
  fi;
record:
  /* [W-record] step B, record CAS (and the AI task's ledger row, insert or nothing) */
  if
  :: CRASH
  :: /* [W-record-retry] the record transaction fails (rolled back): tried again with the
        result held, the call not made again (RecordRetries, within RecordRetryBudget) */
     atomic { recFails > 0 -> recFails-- }; goto record
  :: /* [W-giveup] the record step gives up after its retries: the AI task keeps the result on
        the task (Hold, in PostgreSQL); the job is retried, and on its last attempt snoozed
        (spending a snooze, not an attempt) while snoozes remain, else it fails (the
        reconciler delivers the task again). A publication, which holds nothing, is retried
        and its next delivery finds the product by external_ref; on the last attempt it asks
        its last look. */
     atomic { giveUps > 0 && !TERMINAL -> giveUps--; gaveUp = 1;
       if
       :: jAtm[j] + 1 < JOB_ATTEMPTS -> held = HOLDS; FINISH(j, 1, tok)
#if HOLDS
       :: jAtm[j] + 1 >= JOB_ATTEMPTS && snoozes > 0 -> held = 1; snoozes--; FINISH(j, 2, tok)
       :: jAtm[j] + 1 >= JOB_ATTEMPTS && snoozes == 0 -> held = 1; FINISH(j, 0, tok)
#else
       :: jAtm[j] + 1 >= JOB_ATTEMPTS -> FINALFAIL(); FINISH(j, 0, tok)
#endif
       fi };
     goto end
  :: atomic {
       if
       :: RECORDABLE ->
          assert(tSt != T_FAILED);   /* property 7: a failed task never becomes succeeded */
          tSt = T_SUCCEEDED; held = 0;
          if :: TASK == AI && ledger == 0 -> ledger = 1 :: else -> skip fi
       :: else -> skip
       fi;
       assert(ledger <= 1)   /* billed once (properties 3 and 4) */
     }
  fi;
  if
  :: CRASH
  :: atomic { FINISH(j, 0, tok) }; goto end
  fi;
look:
  /* [L] the delivery of a last look (Flow.look): a finished task is left alone; one whose
     call may still land waits for its fence; else the look asks the upstream by external_ref
     (it may fail: retried, and on the last attempt nothing is recorded), then records what it
     found: the success, or the held failure with the look's completion (one transaction) */
  if
  :: CRASH
  :: atomic { TERMINAL }; goto complete
#if FENCE && !defined(MUT_LOOK_NO_FENCE)
  :: atomic { !TERMINAL && FENCED -> FINISH(j, 3, tok) }; goto end
  :: atomic { !TERMINAL && FENCED && !FENCECALL -> fenceTok = 0 }; goto look   /* after the deadline */
#define LOOKREADY (!TERMINAL && !FENCED)
#else
#define LOOKREADY (!TERMINAL)
#endif
  :: atomic { LOOKREADY && lookFails > 0 -> lookFails--;     /* [L-fail] */
       if
       :: jAtm[j] + 1 < JOB_ATTEMPTS -> FINISH(j, 1, tok)
       :: else ->
#ifdef MUT_BLIND_FAIL
          FAILTASK(F_PLAIN);   /* mutant: a look that failed records the held failure */
#endif
          FINISH(j, 0, tok)
       fi };
     goto end
  :: atomic { LOOKREADY -> if :: effects > 0 -> lk[w] = LK_FOUND :: else -> lk[w] = LK_ABSENT fi }   /* [L-lookup] */
  fi;
  /* [L-record] the success (CAS); or the held failure with the look's completion, unless a
     delivery started the task since the look read it (that run decides) */
  if
  :: CRASH
  :: atomic {
       if
       :: lk[w] == LK_FOUND && RECORDABLE -> assert(tSt != T_FAILED); tSt = T_SUCCEEDED; held = 0
       :: lk[w] == LK_ABSENT && !TERMINAL -> lookFound = L_NOTDONE; FAILTASK(F_PLAIN)
       :: else -> skip
       fi;
       lk[w] = 0 }
  fi;
  if
  :: CRASH
  :: atomic { FINISH(j, 0, tok) }; goto end
  fi;
complete:
  /* [Q-finish] the job completes (or fails) */
  atomic { FINISH(j, 0, tok) };
  goto end;
lost:
  /* [W-lost] the worker that lost the lock drops the job without recording or finishing it
     once its call is over (its reply, or its time-out: after it the call never lands), and
     takes other jobs */
  atomic { cSt[w] = C_NONE; wJob[w] = NE; j = 0 };
  goto end;
crash:
  /* [W-crash] the process dies. Its job's lock is no longer renewed and runs out after
     LOCK_LEFT ticks; a call it sent stays in flight until its time-out (CALL_TO ticks). A new
     process starts once that call is over. */
  atomic {
    if
    :: wJob[w] != NE && jSt[wJob[w]] == J_ACTIVE && jOwner[wJob[w]] == tok -> jLockT[wJob[w]] = LOCK_LEFT
    :: else -> skip
    fi;
    if :: cSt[w] == C_SENT -> cTimer[w] = CALL_TO :: else -> cSt[w] = C_NONE fi;
    wJob[w] = NE; wDown[w] = 1; j = 0; ok = 0; lk[w] = 0
  };
  atomic { cSt[w] != C_SENT -> cSt[w] = C_NONE; cTimer[w] = 0; wInc[w]++; inc++; wDown[w] = 0 };
  goto end
}
#undef tok

/* [G] The gateway (TASK 0) or the AI provider (TASK 1) applies the call of worker w. */
inline LAND(w) {
  if
  :: HONOUR && keyUsed -> skip   /* answered from its idempotency cache */
  :: else ->
     effects++;
#if TASK == AI
#if HONOUR
     assert(effects <= 1)                 /* property 3: one billed AI call per task */
#elif AI_ONCE
     assert(effects <= 1 || EXCUSED)      /* property 4 read literally: one billed run */
#else
     assert(!TERMINAL || EXCUSED)         /* property 4: none for a finished task */
#endif
#else
     assert(tSt != T_FAILED || EXCUSED)   /* property 6: no product lands on a failed publication */
#if HONOUR
     assert(effects <= 1)                 /* property 3: one platform product */
#else
     assert(effects <= 1 || EXCUSED)      /* property 4 */
#endif
#endif
  fi;
  keyUsed = 1;
  cSt[w] = C_LANDED; cTimer[w] = 0
#if GHOST_EXPIRY
  ; cJob[w] = 0
#endif
}

#define ORPHAN(w) (cSt[w] == C_SENT && cTimer[w] > 0)
#define LOCKRUNS(j) (jSt[j] == J_ACTIVE && jOwner[j] != 0 && !W_ALIVE(jOwner[j]) && jLockT[j] > 0)
#define STALLED(j) (jSt[j] == J_ACTIVE && jOwner[j] == 0)
#define BUSY(w) (wJob[w] != NE || cSt[w] == C_SENT)
#define IDLE (!BUSY(0) && !BUSY(1))
/* RECONCILE_AFTER exceeds the longest a healthy task goes without moving, so a task is found
   stuck only when nothing is happening to it: no event owed by the outbox, no live job (the
   probe: waiting, delayed or active), no worker on it, no call in flight for it. */
#define STUCK ((tSt == T_PENDING || tSt == T_RUNNING) && !OWED(0) && !OWED(1) && \
               !LIVE(0) && !LIVE(1) && !BUSY(0) && !BUSY(1))

/* [R] the reconciler on a stuck task (Kind.Reconcile; domain.Task.Reconcile, ReconcileLook) */
inline RECONCILE() {
#if LASTLOOK
  if
  :: lookAsked ->
     /* [R-look] a look was asked: its failure once a look completed and found the work
        absent; else asked again (free) while the task is younger than TASK_MAX_AGE, then
        OUTCOME_UNKNOWN */
     if
     :: lookFound == L_NOTDONE -> FAILTASK(F_PLAIN)
#ifdef MUT_NO_LOOK_WAIT
     :: lookFound != L_NOTDONE -> FAILTASK(F_PLAIN)   /* mutant: failed without a completed look */
#else
     :: lookFound == L_NONE && AGED -> FAILTASK(F_UNKNOWN)
     :: lookFound == L_DONE || (lookFound == L_NONE && !AGED) ->
        if :: redel < MAXFREE -> redel++ :: else -> skip fi; NEWEV(1)
#endif
     fi
  :: else ->
#endif
     if
#ifndef MUT_UNRUN_COUNTS
     :: !tRan ->
        /* [R-unrun] not run since its last delivery: delivered again for free while younger
           than TASK_MAX_AGE; then a task that ran once asks its look, one that never ran
           fails DELIVERY_EXHAUSTED (the upstream never saw it) */
        if
        :: !AGED -> redel++; NEWEV(0)
        :: AGED && (!LASTLOOK || !everRan) -> FAILTASK(F_UNRUN)
        :: AGED && LASTLOOK && everRan -> REQUESTLOOK()
        fi
     :: tRan ->
#else
     :: true ->   /* mutant: every redelivery spends a try, run or not */
#endif
        /* [R-redeliver], [R-exhausted] */
        if
        :: recon < RMAX -> recon++; tRan = 0; NEWEV(0)
        :: else -> FINALFAIL()
        fi
     fi
#if LASTLOOK
  fi
#endif
}

/* [E] The environment. */
proctype Env() {
  byte i, o;
end:
  do
  :: /* nothing else can move: the system stays where it is forever (a stuck end state is an
        infinite run for the liveness properties) */
     timeout -> skip
  :: /* [E-tick] time passes for a dead worker's call and job lock; a call whose time-out
        ends is over (it never lands); a lock that runs out frees the job for the stalled
        check (the ghost notes a call still in flight then) */
     atomic { (ORPHAN(0) || ORPHAN(1) || LOCKRUNS(0) || LOCKRUNS(1)) ->
       d_step {
         for (i : 0 .. NW - 1) {
           if
           :: ORPHAN(i) -> cTimer[i]--;
              if
              :: cTimer[i] == 0 -> cSt[i] = C_NONE
#if GHOST_EXPIRY
                 ; cJob[i] = 0
#endif
              :: else -> skip
              fi
           :: else -> skip
           fi
         }
         for (i : 0 .. NE - 1) {
           if
           :: LOCKRUNS(i) -> jLockT[i]--;
              if
              :: jLockT[i] == 0 ->
#if GHOST_EXPIRY
                 o = (jOwner[i] - 1) % NW;
                 if :: cSt[o] == C_SENT && cJob[o] == i -> lostByExpiry = 1 :: else -> skip fi;
#endif
                 jOwner[i] = 0
              :: else -> skip
              fi
           :: else -> skip
           fi
         }
         i = 0; o = 0
       }
     }
  :: atomic { cSt[0] == C_SENT -> LAND(0) }
  :: atomic { cSt[1] == C_SENT -> LAND(1) }
  :: /* [Q-stalled] BullMQ's stalled check (stalledScript): a job whose lock is gone goes
        back to wait; past MAX_STALLS it fails when next taken */
     atomic { (STALLED(0) || STALLED(1)) ->
       if :: STALLED(0) -> i = 0 :: STALLED(1) -> i = 1 fi;
       jStc[i]++;
       if :: jStc[i] > MAX_STALLS -> jDefa[i] = 1 :: else -> skip fi;
       jSt[i] = J_WAIT;
       i = 0
     }
#ifndef MUT_NO_RECONCILER
  :: /* [R] the reconciler (one sweep at a time; the task in one transaction of its
        workspace) */
     atomic { STUCK -> RECONCILE() }
#endif
  :: /* [E-retention] a finished job's retention and de: key TTL end: its jobId is free */
     atomic { (jSt[0] == J_DONE || jSt[1] == J_DONE) ->
       if :: jSt[0] == J_DONE -> i = 0 :: jSt[1] == J_DONE -> i = 1 fi;
       jSt[i] = J_NONE;
       i = 0
     }
  :: /* [E-redis-lose] Redis restarts without persistence: every job, lock and de: key is
        gone (a restart that keeps the data: [E-redis-keep] in FINISH, and the lost reply of
        [D-publish]) */
     atomic { redisRestarts > 0 && (REDIS_BUSY || IDLE) -> redisRestarts--;
#if GHOST_REDIS
       if :: wJob[0] != NE || wJob[1] != NE || cSt[0] == C_SENT || cSt[1] == C_SENT -> lostByRedis = 1
          :: else -> skip fi;
#endif
       d_step {
         for (i : 0 .. NE - 1) {
           jSt[i] = J_NONE; jOwner[i] = 0; jLockT[i] = 0; jStc[i] = 0; jAtm[i] = 0; jDefa[i] = 0
         }
         i = 0
       }
     }
  od
}

init {
  atomic {
    wJob[0] = NE; wJob[1] = NE;
    /* [C] the committed request: the task row with its request event */
    tSt = T_PENDING; obSt[0] = EV_PENDING;
    run Env();
    run Outbox();
    run Worker(0); run Worker(1)
  }
}
