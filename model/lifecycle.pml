/*
 * delivery.pml: the delivery protocol of the service, from a committed outbox event to the
 * external side effect it asks for, as a Promela model for spin. README.md in this directory
 * maps every step (the [tags] below) to the file and function it stands for.
 *
 * Actors (one proctype each):
 *   Dispatcher  the outbox dispatcher (2): claim with SKIP LOCKED under a lease, publish to
 *               BullMQ before the lease ends, mark guarded by locked_by; lease expiry and
 *               re-claim (one more attempt); dead letter after MAX_ATTEMPTS.
 *   Worker      a BullMQ worker running the task lifecycle (2): take the job under a lock,
 *               begin CAS, the external call outside any transaction, record CAS, and the
 *               error policy: retry, snooze on Retry-After (no attempt spent), final failure
 *               on the last attempt.
 *   Stalled     BullMQ's stalled check: a job whose lock ran out goes back to wait; past
 *               MAX_STALLS it fails when next taken, and its task with JOB_STALLED.
 *   Reconciler  re-delivers a task that is unfinished and quiet (no event owed, no live job,
 *               nobody working on it) through the outbox under a new event/job id; after
 *               RMAX it fails the task with DELIVERY_EXHAUSTED.
 *   Env         the environment: the gateway (task 0) and the AI provider (task 1), which
 *               honour the Idempotency-Key or ignore it; the clock; a Redis restart that
 *               loses the data; lease expiry; the end of a finished job's dedup window.
 *   (Committer) the API's command transactions (a task row and its request event) are
 *               committed in init: the model starts after them.
 *
 * Atomicity: every DB transaction and every Redis script is one atomic step; a process crashes
 * only between steps (a crash inside a transaction is a rollback, i.e. a crash before it).
 *
 * Time. Only one ordering needs a clock: a worker that dies with its call in flight leaves two
 * things running down, its job's lock (LOCK_LEFT ticks: at worst LockDuration minus the
 * renewal period) and its call (CALL_TO ticks: the call's time-out; a call lands within its
 * time-out or never). Env's tick decrements both. Every other expiry is an event that may
 * happen at any moment, which is the most permissive choice: a dead dispatcher's lease, a live
 * one's lease once (a slow dispatcher), a live worker's call time-out, the end of a finished
 * job's retention / de: key TTL. A live worker's lock does not run out (it is renewed every
 * LockDuration/2); Redis losing its data takes every lock at once.
 *
 * Bounded configuration: 2 tasks (task 0 a publication: marketplace with lookup by
 * external_ref; task 1 an AI task: provider, no lookup), 4 event slots (e = t is task t's
 * request event, e = t + 2 the one the reconciler may add; jobId = event id), 2 dispatchers and
 * 2 workers that may each crash once and restart, one Redis restart (keeping or losing the
 * data), one slow dispatcher, one Retry-After.
 */

/* ---- configuration (make passes -D to change) ------------------------------------------ */
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
#define MAX_ATTEMPTS 2  /* OUTBOX_MAX_ATTEMPTS */
#define JOB_ATTEMPTS 2  /* JOB_ATTEMPTS */
#define MAX_STALLS   1  /* JOB_MAX_STALLS */
#define RMAX         1  /* RECONCILE_MAX */

#define NT 2            /* tasks */
#define NE 4            /* event slots = job ids */
#define NW 2            /* workers */
#define PUB 0           /* task 0: publication (marketplace gateway) */
#define AI  1           /* task 1: AI task (AI provider) */

/* ---- state ------------------------------------------------------------------------------ */
/* task rows (publications, ai_tasks) */
#define T_NONE 0        /* not committed */
#define T_PENDING 1
#define T_RUNNING 2
#define T_SUCCEEDED 3
#define T_FAILED 4
#define TERMINAL(t) (tSt[t] >= T_SUCCEEDED)
byte tSt[NT];
byte recon[NT];         /* reconciliations */
byte ledger[NT];        /* ai_ledger rows of the task */

/* outbox_events */
#define EV_NONE 0
#define EV_PENDING 1
#define EV_DISPATCHING 2
#define EV_DISPATCHED 3
#define EV_DEAD 4
byte obSt[NE];
byte obAtt[NE];         /* attempt_count */

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

/* the external systems */
byte products[NT];      /* platform products carrying the task's external_ref */
byte runs[NT];          /* model runs the AI provider billed for the task */
bool keyUsed[NT];       /* the gateway has seen the task's Idempotency-Key */

/* workers and their calls */
#define C_NONE 0
#define C_SENT 1        /* in flight: may still land */
#define C_LANDED 2      /* the gateway applied it; the reply is on its way */
byte wInc[NW];          /* incarnation = crashes so far */
bool wDown[NW];         /* dead, not restarted yet */
byte wJob[NW];          /* job being handled, NE = none */
byte cSt[NW];
byte cTask[NW];
byte cJob[NW];
byte cTimer[NW];        /* ticks left of an orphaned call (its worker died) */

byte snoozes = 1;       /* Retry-After answers left */
byte redisRestarts = 1;

/* ghosts: observation only */
bool added[NE];         /* a job was added for the event */
bool lostByExpiry;      /* a job's lock ran out while its holder's call was in flight */
bool lostByRedis;       /* Redis lost a job while a worker was on it or its call in flight */

#define W_ALIVE(tok) (wInc[((tok) - 1) % NW] == ((tok) - 1) / NW && !wDown[((tok) - 1) % NW])

/* ---- properties ------------------------------------------------------------------------- */
#if STRICT
#define EXCUSED (lostByRedis)
#else
#define EXCUSED (lostByRedis || lostByExpiry)
#endif

#define EVDONE(e) (obSt[e] == EV_NONE || obSt[e] >= EV_DISPATCHED)
#define evdone (EVDONE(0) && EVDONE(1) && EVDONE(2) && EVDONE(3))
#define TDONE(t) (tSt[t] == T_NONE || TERMINAL(t))
#define tasksdone (TDONE(0) && TDONE(1))

/* 1: every committed event is eventually dispatched or dead-lettered (no loss) */
ltl p1 { <> [] evdone }
/* 2: every committed task (so every dispatched one) eventually reaches a terminal state */
ltl p2 { <> [] tasksdone }
/* 3, 4 and 5 are assertions: LAND (3, 4), [W-record] (ledger), [D-mark] (5). */

/* ---- BullMQ scripts --------------------------------------------------------------------- */
/* [Q-add] addScript: nothing written while the job hash or its de: key exists */
inline ADD(e) {
#ifdef MUT_NO_DEDUP
  jSt[e] = J_WAIT; jOwner[e] = 0; jStc[e] = 0; jAtm[e] = 0; jDefa[e] = 0;
#else
  if
  :: jSt[e] != J_NONE -> skip
  :: else -> jSt[e] = J_WAIT; jOwner[e] = 0; jStc[e] = 0; jAtm[e] = 0; jDefa[e] = 0
  fi;
#endif
  added[e] = 1
}

/* [Q-finish] finishScript, token checked: complete/fail (kind 0), retry (1), hand back (2) */
inline FINISH(j, kind, tk) {
  if
  :: jSt[j] == J_ACTIVE && jOwner[j] == tk ->
     if
     :: kind == 0 -> jSt[j] = J_DONE; jOwner[j] = 0
     :: kind == 1 -> jSt[j] = J_WAIT; jOwner[j] = 0; jAtm[j]++
     :: kind == 2 -> jSt[j] = J_WAIT; jOwner[j] = 0
     :: redisRestarts > 0 -> redisRestarts--; jOwner[j] = 0
        /* [E-redis-keep] Redis restarts keeping its data while the finish is sent: the
           finish is lost; the worker, done with the job, no longer renews its lock, which runs
           out (no call in flight): the job is active without a lock, for the stalled check */
     fi
  :: else -> skip   /* the lock is gone: another worker may hold the job */
  fi;
  wJob[w] = NE
}

/* [T-fail] FailTask: compare-and-set; a finished task is left alone. An AI task's failure
   records its ledger row in the same transaction (insert or nothing). */
inline FAILTASK(t) {
  if
  :: !TERMINAL(t) -> tSt[t] = T_FAILED;
     if :: t == AI && ledger[t] == 0 -> ledger[t] = 1 :: else -> skip fi
  :: else -> skip
  fi
}

/* ---- actors ----------------------------------------------------------------------------- */

/* [O] The outbox, as outbox.pml proves it behaves (its contract): an event is marked
   dispatched only after its job was added (property 5); while it is owed (pending) its job may
   be added again (a lease that ran out, a lost reply: at most MAX_ATTEMPTS deliveries); it
   ends dispatched or dead_letter (property 1), with or without a job added. */
#define OWEDP(e) (obSt[e] == EV_PENDING)
proctype Outbox() {
  byte e;
end:
  do
  :: /* [O-publish] a delivery: [D-claim] + [D-publish] (addScript, deduplicated) */
     atomic { ((OWEDP(0) && obAtt[0] < MAX_ATTEMPTS) || (OWEDP(1) && obAtt[1] < MAX_ATTEMPTS) ||
               (OWEDP(2) && obAtt[2] < MAX_ATTEMPTS) || (OWEDP(3) && obAtt[3] < MAX_ATTEMPTS)) ->
       if
       :: OWEDP(0) && obAtt[0] < MAX_ATTEMPTS -> e = 0
       :: OWEDP(1) && obAtt[1] < MAX_ATTEMPTS -> e = 1
       :: OWEDP(2) && obAtt[2] < MAX_ATTEMPTS -> e = 2
       :: OWEDP(3) && obAtt[3] < MAX_ATTEMPTS -> e = 3
       fi;
       ADD(e); obAtt[e]++; e = 0 }
  :: /* [O-mark] [D-mark] dispatched, only after an add */
     atomic { ((OWEDP(0) && added[0]) || (OWEDP(1) && added[1]) || (OWEDP(2) && added[2]) || (OWEDP(3) && added[3])) ->
       if :: OWEDP(0) && added[0] -> e = 0 :: OWEDP(1) && added[1] -> e = 1
          :: OWEDP(2) && added[2] -> e = 2 :: OWEDP(3) && added[3] -> e = 3 fi;
       obSt[e] = EV_DISPATCHED; e = 0 }
  :: /* [O-dead] dead_letter */
     atomic { (OWEDP(0) || OWEDP(1) || OWEDP(2) || OWEDP(3)) ->
       if :: OWEDP(0) -> e = 0 :: OWEDP(1) -> e = 1 :: OWEDP(2) -> e = 2 :: OWEDP(3) -> e = 3 fi;
       obSt[e] = EV_DEAD; e = 0 }
  od
}

#define WAITING(j) (jSt[j] == J_WAIT)
#define WCRASH if :: skip :: inc == 0 -> goto crash fi

/* [W] A BullMQ worker running the task lifecycle. */
#define tok (w + 1 + NW * inc)   /* this process's lock token */
#define t (j % NT)               /* the job's task */
proctype Worker(byte w) {
  byte j, inc;   /* j: the job handled; inc: crashes so far */
end:
  do
  :: /* [Q-take] takeScript: a waiting job moves to active under this worker's lock */
     atomic {
       (WAITING(0) || WAITING(1) || WAITING(2) || WAITING(3));
       if :: WAITING(0) -> j = 0 :: WAITING(1) -> j = 1 :: WAITING(2) -> j = 2 :: WAITING(3) -> j = 3 fi;
       jSt[j] = J_ACTIVE; jOwner[j] = tok; wJob[w] = j
     };
     WCRASH;
     if
     :: jDefa[j] ->
        /* [W-abandon] stalled too often: the task fails with JOB_STALLED, then the job */
        atomic { FAILTASK(t) };
        goto complete
     :: else -> skip
     fi;
     /* [W-begin] step A, begin CAS: a finished task is skipped (the job completes) */
     atomic {
#ifndef MUT_NO_BEGIN_CAS
       if :: TERMINAL(t) -> goto complete :: else -> skip fi;
#endif
       if :: !TERMINAL(t) -> tSt[t] = T_RUNNING :: else -> skip fi
     };
     WCRASH;
#ifndef MUT_NO_LOOKUP
     if
     :: t == PUB ->
        /* [W-lookup] FindProductByExternalRef before create */
        atomic { if :: products[t] > 0 -> goto record :: else -> skip fi }
     :: else -> skip
     fi;
#endif
     /* [W-call] the external call, outside any transaction, Idempotency-Key = the task id */
     atomic { cSt[w] = C_SENT; cTask[w] = t; cJob[w] = j };
     WCRASH;
     if
     :: atomic { cSt[w] == C_LANDED -> cSt[w] = C_NONE }; goto record                /* reply */
     :: atomic { cSt[w] == C_LANDED -> cSt[w] = C_NONE }; goto failed                /* reply lost */
     :: atomic { cSt[w] == C_SENT -> cSt[w] = C_NONE }; goto failed                  /* time-out */
     :: atomic { cSt[w] == C_SENT && snoozes > 0 -> snoozes--; cSt[w] = C_NONE }; goto snooze
     fi;
failed:
     /* [W-retry] outcome unknown: the publication looks once more; then retry, or fail on
        the last attempt */
#ifndef MUT_NO_LOOKUP
     if
     :: t == PUB ->
        atomic { if :: products[t] > 0 -> goto record :: else -> skip fi }
     :: else -> skip
     fi;
#endif
     if
     :: jAtm[j] + 1 < JOB_ATTEMPTS -> atomic { FINISH(j, 1, tok) }; goto next
     :: else -> goto final
     fi;
snooze:
     /* [W-snooze] 429 Retry-After: back to the queue without spending an attempt */
     atomic { FINISH(j, 2, tok) };
     goto next;
final:
     /* [W-fail] the last attempt failed: FailTask, then the job fails */
     atomic { FAILTASK(t) };
     WCRASH;
     goto complete;
record:
     /* [W-record] step B, record CAS (and the AI task's ledger row, insert or nothing) */
     WCRASH;
     atomic {
       if
       :: !TERMINAL(t) -> tSt[t] = T_SUCCEEDED;
          if :: t == AI && ledger[t] == 0 -> ledger[t] = 1 :: else -> skip fi
       :: else -> skip
       fi;
       assert(ledger[AI] <= 1)   /* billed once (properties 3 and 4) */
     };
     WCRASH;
complete:
     /* [Q-finish] the job completes (or fails) */
     atomic { FINISH(j, 0, tok) };
next:
     j = 0
  od;
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
    wJob[w] = NE; wDown[w] = 1
  };
  atomic { cSt[w] != C_SENT ->
    cSt[w] = C_NONE; cTimer[w] = 0; wInc[w]++; inc++; wDown[w] = 0; j = 0 };
  goto end
}
#undef tok
#undef t

#define STALLED(j) (jSt[j] == J_ACTIVE && jOwner[j] == 0)

/* [Q-stalled] BullMQ's stalled check (stalledScript) */
proctype Stalled() {
  byte j;
end:
  do
  :: atomic {
       (STALLED(0) || STALLED(1) || STALLED(2) || STALLED(3));
       if :: STALLED(0) -> j = 0 :: STALLED(1) -> j = 1 :: STALLED(2) -> j = 2 :: STALLED(3) -> j = 3 fi;
       jStc[j]++;
       if :: jStc[j] > MAX_STALLS -> jDefa[j] = 1 :: else -> skip fi;
       jSt[j] = J_WAIT;
       j = 0
     }
  od
}

#define OWED(e) (obSt[e] == EV_PENDING || obSt[e] == EV_DISPATCHING)
#define LIVE(e) (jSt[e] == J_WAIT || jSt[e] == J_ACTIVE)
#define BUSY(w, t) ((wJob[w] != NE && wJob[w] % NT == (t)) || (cSt[w] == C_SENT && cTask[w] == (t)))
/* RECONCILE_AFTER exceeds the longest a healthy task goes without moving, so a task is found
   stuck only when nothing is happening to it: no event owed by the outbox, no live job, no
   worker on it, no call in flight for it. */
#define STUCK(t) ((tSt[t] == T_PENDING || tSt[t] == T_RUNNING) && !OWED(t) && !OWED(t + 2) && \
                  !LIVE(t) && !LIVE(t + 2) && !BUSY(0, t) && !BUSY(1, t))

/* [R] The reconciler (one sweep at a time; a task in one transaction of its workspace) */
proctype Reconciler() {
  byte t;
end:
  do
  :: atomic {
       (STUCK(0) || STUCK(1));
       if :: STUCK(0) -> t = 0 :: STUCK(1) -> t = 1 fi;
       if
       :: recon[t] < RMAX -> recon[t]++; obSt[t + 2] = EV_PENDING   /* [R-redeliver] */
       :: else -> FAILTASK(t)                                       /* [R-exhausted] */
       fi;
       t = 0
     }
  od
}

/* [G] The gateway (task 0) or the AI provider (task 1) applies the call of worker w. */
inline LAND(w) {
  t = cTask[w];
  if
  :: HONOUR && keyUsed[t] -> skip   /* answered from its idempotency cache */
  :: else ->
     if
     :: t == PUB -> products[t]++
     :: else -> runs[t]++
#if HONOUR
        ; assert(runs[t] <= 1)                 /* property 3: one billed AI call per task */
#elif AI_ONCE
        ; assert(runs[t] <= 1 || EXCUSED)      /* property 4 read literally: one billed run */
#else
        ; assert(!TERMINAL(t) || EXCUSED)      /* property 4: none for a finished task */
#endif
     fi
  fi;
  keyUsed[t] = 1;
#if HONOUR
  assert(products[PUB] <= 1);                  /* property 3: one platform product */
#else
  assert(products[PUB] <= 1 || EXCUSED);       /* property 4 */
#endif
  cSt[w] = C_LANDED; cTimer[w] = 0;
  t = 0
}

#define ORPHAN(w) (cSt[w] == C_SENT && cTimer[w] > 0)
#define LOCKRUNS(j) (jSt[j] == J_ACTIVE && jOwner[j] != 0 && !W_ALIVE(jOwner[j]) && jLockT[j] > 0)

/* [E] The environment. */
proctype Env() {
  byte i, t, o;
end:
  do
  :: /* nothing else can move: the system stays where it is forever (a stuck end state is an
        infinite run for the liveness properties) */
     timeout -> skip
  :: /* [E-tick] time passes for a dead worker's call and job lock; a call whose time-out
        ends is over (it never lands); a lock that runs out frees the job for the stalled
        check (the ghost notes a call still in flight then) */
     atomic { (ORPHAN(0) || ORPHAN(1) || LOCKRUNS(0) || LOCKRUNS(1) || LOCKRUNS(2) || LOCKRUNS(3)) ->
       d_step {
         for (i : 0 .. NW - 1) {
           if
           :: ORPHAN(i) -> cTimer[i]--; if :: cTimer[i] == 0 -> cSt[i] = C_NONE :: else -> skip fi
           :: else -> skip
           fi
         }
         for (i : 0 .. NE - 1) {
           if
           :: LOCKRUNS(i) -> jLockT[i]--;
              if
              :: jLockT[i] == 0 ->
                 o = (jOwner[i] - 1) % NW;
                 if :: cSt[o] == C_SENT && cJob[o] == i -> lostByExpiry = 1 :: else -> skip fi;
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
  :: /* [E-retention] a finished job's retention and de: key TTL end: its jobId is free */
     atomic { (jSt[0] == J_DONE || jSt[1] == J_DONE || jSt[2] == J_DONE || jSt[3] == J_DONE) ->
       if :: jSt[0] == J_DONE -> i = 0 :: jSt[1] == J_DONE -> i = 1 :: jSt[2] == J_DONE -> i = 2 :: jSt[3] == J_DONE -> i = 3 fi;
       jSt[i] = J_NONE; jAtm[i] = 0; jStc[i] = 0; jDefa[i] = 0;
       i = 0
     }
  :: /* [E-redis-lose] Redis restarts without persistence: every job, lock and de: key is
        gone (a restart that keeps the data: [E-redis-keep] in FINISH, and the lost reply of
        [D-publish]) */
     atomic { redisRestarts > 0 -> redisRestarts--;
       d_step {
         for (i : 0 .. NE - 1) {
           if :: wJob[0] == i || wJob[1] == i || (cJob[0] == i && cSt[0] == C_SENT) || (cJob[1] == i && cSt[1] == C_SENT) ->
                 lostByRedis = 1
              :: else -> skip fi;
           jSt[i] = J_NONE; jOwner[i] = 0; jLockT[i] = 0; jStc[i] = 0; jAtm[i] = 0; jDefa[i] = 0
         }
         i = 0
       }
     }
  od
}

init {
  byte i;
  atomic {
    for (i : 0 .. NW - 1) { wJob[i] = NE; cTask[i] = NT }
    i = 0;
    /* [C] the committed requests: each task row with its request event */
    tSt[TASK] = T_PENDING; obSt[TASK] = EV_PENDING;
    run Env();
    run Outbox();
    run Worker(0); run Worker(1);
    run Stalled();
#ifndef MUT_NO_RECONCILER
    run Reconciler()
#endif
  }
}
