/*
 * outbox.pml: the outbox half of the delivery protocol (README.md maps each [tag] to code).
 * lifecycle.pml models the other half and uses what this model proves as its Outbox process.
 *
 * Actors:
 *   Dispatcher  the outbox dispatcher (2): claim with FOR UPDATE SKIP LOCKED under a lease
 *               (locked_by, locked_until), publish to BullMQ before the round's deadline, mark
 *               guarded by locked_by; a claim whose lease is over is taken again and counts
 *               one attempt; dead_letter after MAX_ATTEMPTS. Each may crash once and restart.
 *   (Queue)     BullMQ as the dispatchers see it: an add succeeds, or its reply is lost (a
 *               Redis restart, a network error), or Redis is unreachable. What becomes of the
 *               job afterwards (deduplication, retention, a Redis restart losing it) changes
 *               nothing a dispatcher does, so this model does not track it: lifecycle.pml does.
 *   (Reconciler) the other source of events: once task 0's event is finished in the outbox it
 *               may insert a new request event for it (a new id): an action of Env.
 *   Env         lease expiry: a dead dispatcher's lease ends at some point, a live one's once
 *               (a slow dispatcher whose round outlives its lease).
 * Every transaction and every Redis script is one atomic step; crashes fall between them.
 */

#define MAX_ATTEMPTS 2
#define NE 3            /* events 0, 1 committed; 2 inserted by the reconciler (for task 0) */
#define ND 2

#define EV_NONE 0
#define EV_PENDING 1
#define EV_DISPATCHING 2
#define EV_DISPATCHED 3
#define EV_DEAD 4
byte obSt[NE];
byte obBy[NE];          /* locked_by: the claim's token, 0 = none */
bool obExp[NE];         /* locked_until <= now() */
byte obAtt[NE];         /* attempt_count */

byte dInc[ND];
byte slow = 1;
bool added[NE];         /* ghost: a job was added for the event */

#define DTOK(d) ((d) + 1 + ND * dInc[d])
#define D_ALIVE(tok) (dInc[((tok) - 1) % ND] == ((tok) - 1) / ND)

#define EVDONE(e) (obSt[e] == EV_NONE || obSt[e] >= EV_DISPATCHED)
#define evdone (EVDONE(0) && EVDONE(1) && EVDONE(2))
/* 1: every committed event is eventually dispatched or dead-lettered (no loss) */
ltl p1 { <> [] evdone }
/* 5 is the assertion in [D-mark]. */

/* [Q-add] addScript (deduplicated by jobId: see lifecycle.pml) */
inline ADD(e) {
  added[e] = 1
}

#define DUE(e) (obSt[e] == EV_PENDING || (obSt[e] == EV_DISPATCHING && obExp[e]))
#define CRASH inc == 0 -> goto crash

/* [D] An outbox dispatcher. Its crash is an alternative of its next step ("crash before the
   step"), so that the choice adds no state of its own. */
proctype Dispatcher(byte d) {
  byte e, tok, inc;   /* inc: crashes so far */
  bool ok;
  tok = DTOK(d);
end:
  /* [D-claim] claimSQL: a due row (pending, or dispatching with its lease over, which counts
     one attempt and may end in dead_letter) */
  atomic {
    (DUE(0) || DUE(1) || DUE(2));
    if :: DUE(0) -> e = 0 :: DUE(1) -> e = 1 :: DUE(2) -> e = 2 fi;
    if
    :: obSt[e] == EV_DISPATCHING && obAtt[e] + 1 >= MAX_ATTEMPTS ->
       obAtt[e]++; obSt[e] = EV_DEAD; obBy[e] = 0; obExp[e] = 0; e = 0; goto end
    :: obSt[e] == EV_DISPATCHING && obAtt[e] + 1 < MAX_ATTEMPTS ->
       obAtt[e]++; obBy[e] = tok; obExp[e] = 0
    :: obSt[e] == EV_PENDING ->
       obSt[e] = EV_DISPATCHING; obBy[e] = tok; obExp[e] = 0
    fi
  };
  /* [D-publish] deliver/publishGroup, before the round's deadline (Lease - Lease/5) */
  if
  :: CRASH
  :: atomic { obBy[e] == tok && !obExp[e] -> ADD(e); ok = 1 }
  :: atomic { obBy[e] == tok && !obExp[e] -> ADD(e); ok = 0 }   /* added, reply lost */
  :: ok = 0                                                      /* Redis unreachable */
  :: atomic { !(obBy[e] == tok && !obExp[e]) ->
       /* [D-release] releaseSQL: deadline passed, nothing published, no attempt counted */
       if
       :: obBy[e] == tok && obSt[e] == EV_DISPATCHING -> obSt[e] = EV_PENDING; obBy[e] = 0; obExp[e] = 0
       :: else -> skip
       fi;
       e = 0; ok = 0 };
     goto end
  fi;
  /* [D-mark] markDispatchedSQL / markFailedSQL, where the claim still holds the event */
  if
  :: CRASH
  :: atomic {
       if
#ifdef MUT_NO_LOCKEDBY
       :: obSt[e] == EV_DISPATCHING ->
#else
       :: obBy[e] == tok && obSt[e] == EV_DISPATCHING ->
#endif
          if
          :: ok -> assert(added[e]);   /* property 5 */
             obSt[e] = EV_DISPATCHED
          :: else -> obAtt[e]++;
             if :: obAtt[e] >= MAX_ATTEMPTS -> obSt[e] = EV_DEAD :: else -> obSt[e] = EV_PENDING fi
          fi;
          obBy[e] = 0; obExp[e] = 0
       :: else -> skip   /* lease lost: another dispatcher holds the event */
       fi;
       e = 0; ok = 0
     };
     goto end
  fi;
crash:
  /* [D-crash] the process dies; its claim waits for its lease; a new process starts */
  atomic { dInc[d]++; inc++; tok = DTOK(d); e = 0; ok = 0 };
  goto end
}

#define LEASEENDS(e) (obSt[e] == EV_DISPATCHING && !obExp[e] && (!D_ALIVE(obBy[e]) || slow > 0))

/* [E] lease expiry and the reconciler's insert */
proctype Env() {
  byte i;
end:
  do
  :: /* nothing else can move: the system stays where it is forever (a stuck end state is an
        infinite run for the liveness properties) */
     timeout -> skip
  :: /* [E-lease] a claim's lease ends: its dispatcher died, or (once) it is too slow */
     atomic { (LEASEENDS(0) || LEASEENDS(1) || LEASEENDS(2)) ->
       if :: LEASEENDS(0) -> i = 0 :: LEASEENDS(1) -> i = 1 :: LEASEENDS(2) -> i = 2 fi;
       if :: D_ALIVE(obBy[i]) -> slow-- :: else -> skip fi;
       obExp[i] = 1; i = 0 }
  :: /* [R-redeliver] the reconciler inserts a new request event for task 0, whose event the
        outbox no longer owes */
     atomic { obSt[0] >= EV_DISPATCHED && obSt[2] == EV_NONE -> obSt[2] = EV_PENDING }
  od
}

init {
  atomic {
    /* [C] two committed request events */
    obSt[0] = EV_PENDING; obSt[1] = EV_PENDING;
    run Env();
    run Dispatcher(0); run Dispatcher(1)
  }
}
