/*
 * lifecycle.pml: the delivery protocol from a committed outbox event to the external side
 * effect it asks for, for one task (README.md maps every [tag] below to the file and function
 * it stands for). outbox.pml checks the outbox half; here the Outbox process does only what
 * that model proves.
 *
 * This model abstracts four paths of the code: the last look is joined with the failure it
 * precedes, Redis restarts once, the record step never gives up, and there is no call fence.
 * lifecycle_full.pml has them (its searches one path each); this one keeps both workers'
 * crashes with the shutdown, the failed record transaction and a live worker's lock loss.
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
 * Bounded configuration: one task (TASK), 2 event slots (0 the request, 1 the one the
 * reconciler may add; jobId = event id), the Outbox contract, 2 workers that may each crash
 * once and restart, one Redis restart (keeping or losing the data), one Retry-After.
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
#define STOPS 1         /* shutdowns (SIGTERM) of a worker holding a job */
#define RECFAILS 1      /* record transactions that fail after a successful call */
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
byte recon;             /* reconciliations */
byte ledger;            /* ai_ledger rows of the task */

/* outbox_events */
#define EV_NONE 0
#define EV_PENDING 1
#define EV_DISPATCHED 3
#define EV_DEAD 4
byte obSt[NE];
byte obAtt[NE];         /* attempt_count (reset once the event is delivered: no step reads it) */

/* BullMQ: one job per event, jobId = event id */
#define J_NONE 0        /* no job hash (never added, retention over, or lost) */
#define J_WAIT 1        /* wait (or delayed) */
#define J_ACTIVE 2
#define J_DONE 3        /* completed or failed, hash and de: key kept: duplicates ignored */
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

byte snoozes = 1;       /* Retry-After answers left */
byte redisRestarts = 1;
byte lockLosses = LOSSES; /* a live worker's lock lost: renewals failed until it may have run out */
byte stops = STOPS;     /* a worker stopped (SIGTERM) while it holds a job */
byte recFails = RECFAILS; /* a record transaction fails (the database, a deadlock) */

/* ghosts: observation only */
bool added[NE];         /* a job was added for the owed event */
#if GHOST_EXPIRY
bool lostByExpiry;      /* a job's lock ran out while its holder's call was in flight */
#endif
#if GHOST_REDIS
bool lostByRedis;       /* Redis lost a job while a worker was on it or its call in flight */
#endif

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
/* 3, 4 are assertions in LAND and [W-record] (ledger); 5 is the Outbox contract's. */

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

/* [Q-finish] finishScript, token checked: complete/fail (kind 0), retry (1), hand back (2).
   A finished job's counters are read by no step any more: they are reset. */
inline FINISH(j, kind, tk) {
  if
  :: jSt[j] == J_ACTIVE && jOwner[j] == tk ->
     if
     :: kind == 0 -> jSt[j] = J_DONE; jOwner[j] = 0; jStc[j] = 0; jAtm[j] = 0; jDefa[j] = 0
     :: kind == 1 -> jSt[j] = J_WAIT; jOwner[j] = 0; jAtm[j]++
     :: kind == 2 -> jSt[j] = J_WAIT; jOwner[j] = 0
     :: redisRestarts > 0 -> redisRestarts--; jOwner[j] = 0
        /* [E-redis-keep] Redis restarts keeping its data while the finish is sent: the
           finish is lost; the worker, done with the job, no longer renews its lock, which runs
           out (no call in flight): the job is active without a lock, for the stalled check */
     fi
  :: else -> skip   /* the lock is gone: another worker may hold the job */
  fi;
  wJob[w] = NE; j = 0
}

/* [T-fail] FailTask: compare-and-set; a finished task is left alone. An AI task's failure
   records its ledger row in the same transaction (insert or nothing). */
inline FAILTASK() {
  if
  :: !TERMINAL ->
#if LASTLOOK
     /* [W-lastlook] before any final failure (the handler's, JOB_STALLED, DELIVERY_EXHAUSTED)
        the publication looks its product up by external_ref: found, it succeeds */
     if
     :: effects > 0 -> tSt = T_SUCCEEDED
     :: else -> tSt = T_FAILED
     fi;
#else
     tSt = T_FAILED;
#endif
     /* property 6: a publication never fails while the platform holds its product */
     assert(TASK == AI || tSt != T_FAILED || effects == 0 || EXCUSED);
     if :: TASK == AI && ledger == 0 -> ledger = 1 :: else -> skip fi
  :: else -> skip
  fi
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
  :: /* [O-dead] dead_letter */
     atomic { (OWEDP(0) || OWEDP(1)) ->
       if :: OWEDP(0) -> e = 0 :: OWEDP(1) -> e = 1 fi;
       obSt[e] = EV_DEAD; DELIVERED(e); e = 0 }
  od
}

#define WAITING(j) (jSt[j] == J_WAIT)
#define CRASH inc == 0 -> goto crash
#if GHOST_EXPIRY
#define SEND cSt[w] = C_SENT; cJob[w] = j
#else
#define SEND cSt[w] = C_SENT
#endif

/* [W] A BullMQ worker running the task lifecycle. */
#define tok (w + 1 + NW * inc)   /* this process's lock token */
proctype Worker(byte w) {
  byte j, inc;   /* j: the job handled; inc: crashes so far */
end:
  /* [Q-take] takeScript: a waiting job moves to active under this worker's lock */
  atomic {
    (WAITING(0) || WAITING(1));
    if :: WAITING(0) -> j = 0 :: WAITING(1) -> j = 1 fi;
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
  :: /* [W-abandon] stalled too often: the task fails with JOB_STALLED, then the job */
     atomic { jDefa[j] -> FAILTASK() };
     goto complete
  :: /* [W-begin] step A, begin CAS: a finished task is skipped (the job completes) */
     atomic { !jDefa[j] ->
#ifndef MUT_NO_BEGIN_CAS
       if :: TERMINAL -> goto complete :: else -> skip fi;
#endif
       if :: !TERMINAL -> tSt = T_RUNNING :: else -> skip fi
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
  :: atomic { effects == 0 -> SEND }
#else
  :: atomic { SEND }
#endif
  fi;
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
  /* [W-retry] outcome unknown: the publication looks once more; then retry, or fail on
     the last attempt */
  if
#if LOOKUP
  :: atomic { effects > 0 }; goto record
#define NOTFOUND effects == 0 &&
#else
#define NOTFOUND
#endif
  :: atomic { NOTFOUND jAtm[j] + 1 < JOB_ATTEMPTS -> FINISH(j, 1, tok) }; goto end
  :: atomic { NOTFOUND jAtm[j] + 1 >= JOB_ATTEMPTS -> FAILTASK() }   /* [W-fail] FailTask */
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
  :: atomic {
       if
       :: RECORDABLE ->
          assert(tSt != T_FAILED);   /* property 7: a failed task never becomes succeeded */
          tSt = T_SUCCEEDED;
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
    wJob[w] = NE; wDown[w] = 1; j = 0
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
#define OWED(e) (obSt[e] == EV_PENDING)
#define LIVE(e) (jSt[e] == J_WAIT || jSt[e] == J_ACTIVE)
#define BUSY(w) (wJob[w] != NE || cSt[w] == C_SENT)
/* RECONCILE_AFTER exceeds the longest a healthy task goes without moving, so a task is found
   stuck only when nothing is happening to it: no event owed by the outbox, no live job, no
   worker on it, no call in flight for it. */
#define STUCK ((tSt == T_PENDING || tSt == T_RUNNING) && !OWED(0) && !OWED(1) && \
               !LIVE(0) && !LIVE(1) && !BUSY(0) && !BUSY(1))

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
        workspace): re-delivery under a new event id, or DELIVERY_EXHAUSTED */
     atomic { STUCK ->
       if
       :: recon < RMAX -> recon++; obSt[1] = EV_PENDING   /* [R-redeliver] */
       :: else -> FAILTASK()                              /* [R-exhausted] */
       fi
     }
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
     atomic { redisRestarts > 0 -> redisRestarts--;
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
