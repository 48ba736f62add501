#!/usr/bin/env node
'use strict';
// A corral teammate in plain Node.js: proof that the proto is the contract.
//
// Environment:
//   CORRAL_ADDRESS           grpc-js target, e.g. unix:/abs/path/corral.sock (required)
//   CORRAL_TOKEN             this teammate's bearer credential (required)
//   CORRAL_NAME              name put into results and logs (default "node")
//   CORRAL_MAX_IDLE_POLLS    IdleRequest.max_idle_polls (default 0 = daemon default)
//   CORRAL_POLL_INTERVAL_MS  IdleRequest.poll_interval in ms (default 0 = daemon default)
//   CORRAL_SLOTS             IdleRequest.slots (default 0 = daemon default, 1)
//   CORRAL_WORK_MS           how long "work" on each task takes (default 0)
//   CORRAL_RECONNECT_MS      how long to keep reconnecting a broken stream (default 15000)
//   CORRAL_TRANSPORT         idle (default): an Idle stream and unary calls;
//                            session: one Session stream carrying the events and the ops
//   CORRAL_OP_TIMEOUT_MS     session: an op unanswered this long breaks the stream (default 30000)
//
// stdout: one JSON object per line per notable event (see log()).
// Exit codes: 0 clean end (shutdown approved, idle timeout, stream ended OK),
// 1 unexpected failure, 2 credential refused, 3 superseded by another stream.
//
// The loop every teammate implements (docs/polyglot.md), on either transport
// (idle.js, session.js):
//   - open one stream; handle each event, acknowledging inbox items after
//     handling them;
//   - protocol before work: a shutdown_request is acknowledged at once and
//     answered as soon as no task is held;
//   - claims are re-sent on every new stream: dedupe them by claim_token;
//   - renew the lease every third of its duration while working;
//   - drop a task (and carry on) on LEASE_EXPIRED, TASK_CANCELED or
//     CLAIM_TOKEN_MISMATCH.

const {
  grpc,
  loadContract,
  requireEnv,
  intEnv,
  bearer,
  unary,
  wait,
  durationToMs,
  timestampToMs,
  msToDuration,
  log: rawLog,
} = require('./corral');
const { errorDetails } = require('./rpc_status');
const { IdleTransport } = require('./idle');
const { SessionTransport } = require('./session');

const NAME = process.env.CORRAL_NAME || 'node';
const ADDRESS = requireEnv('CORRAL_ADDRESS');
const TOKEN = requireEnv('CORRAL_TOKEN');
const MAX_IDLE_POLLS = intEnv('CORRAL_MAX_IDLE_POLLS', 0);
const POLL_INTERVAL_MS = intEnv('CORRAL_POLL_INTERVAL_MS', 0);
const SLOTS = intEnv('CORRAL_SLOTS', 0);
const WORK_MS = intEnv('CORRAL_WORK_MS', 0);
const RECONNECT_MS = intEnv('CORRAL_RECONNECT_MS', 15000);
const OP_TIMEOUT_MS = intEnv('CORRAL_OP_TIMEOUT_MS', 30000);
const TRANSPORTS = { idle: IdleTransport, session: SessionTransport };
const TRANSPORT = process.env.CORRAL_TRANSPORT || 'idle';
if (!Object.hasOwn(TRANSPORTS, TRANSPORT)) {
  process.stderr.write(`CORRAL_TRANSPORT must be idle or session, got ${JSON.stringify(TRANSPORT)}\n`);
  process.exit(64);
}

const S = grpc.status;
// Errors about a claim that mean "this task is no longer yours": drop it, carry on.
const DROP_REASONS = new Set(['LEASE_EXPIRED', 'TASK_CANCELED', 'CLAIM_TOKEN_MISMATCH']);
// Worth retrying the same call: the daemon is busy or briefly unreachable.
const TRANSIENT = new Set([S.UNAVAILABLE, S.RESOURCE_EXHAUSTED]);

const log = (event, fields = {}) => rawLog(event, { teammate: NAME, ...fields });

const { v1 } = loadContract();
const client = new v1.TeammateService(ADDRESS, grpc.credentials.createInsecure());

const seenClaimTokens = new Set(); // every claim token ever received: claims are re-sent per stream
const held = new Map(); // claim_token -> work state of a task we are working on
const pending = new Set(); // outstanding async work, awaited before exiting
let ackedThrough = 0;
let ackChain = Promise.resolve();
let shutdown = null; // { request_id, responded }
let idleTimedOut = false;
let streamLostAt = 0;
let exiting = false;

function track(promise) {
  pending.add(promise);
  promise.finally(() => pending.delete(promise)).catch(() => {});
  return promise;
}

/**
 * `attempt()` (one call or op), tried again while the daemon is busy or
 * unreachable. On Session each try is a new op with a new op_id: an op
 * refused as busy did not run.
 */
async function retrying(method, attempt, { attempts = 8 } = {}) {
  let backoff = 100;
  for (let i = 1; ; i += 1) {
    try {
      return await attempt();
    } catch (err) {
      if (!TRANSIENT.has(err.code) || i >= attempts) throw err;
      const info = errorDetails(err);
      const delay = info.retry_delay_ms > 0 ? info.retry_delay_ms : backoff;
      log('retry', { method, code: err.code, reason: info.reason, delay_ms: delay });
      await wait(delay);
      backoff = Math.min(backoff * 2, 2000);
    }
  }
}

/** A unary TeammateService call with the credential (RespondShutdown: unary on both transports). */
function call(method, request) {
  return retrying(method, () => unary(client, method, request, bearer(TOKEN)));
}

/** Acknowledge inbox items through `seq`, in order, never going backwards. */
function ack(seq) {
  const n = Number(seq);
  ackChain = ackChain.then(async () => {
    if (n <= ackedThrough) return;
    try {
      const res = await retrying('ack', () => transport.ack(n));
      // An op result has no acked_through_seq: OK means acknowledged through n.
      ackedThrough = Math.max(ackedThrough, Number(res.acked_through_seq || n));
      log('acked', { through_seq: n, op_id: res.op_id });
    } catch (err) {
      log('ack_error', { through_seq: n, ...brief(err) });
    }
  });
  return track(ackChain);
}

function brief(err) {
  const e = errorDetails(err);
  return { code: e.code, reason: e.reason, details: e.details };
}

function maybeAnswerShutdown() {
  if (!shutdown || shutdown.responded || held.size > 0) return;
  shutdown.responded = true;
  track(
    (async () => {
      try {
        await call('RespondShutdown', { request_id: shutdown.request_id, approve: true, reason: 'no task held' });
        log('shutdown', { request_id: shutdown.request_id, approve: true });
      } catch (err) {
        log('shutdown_error', { request_id: shutdown.request_id, ...brief(err) });
        finish(1, 'respond_shutdown_failed');
      }
    })(),
  );
}

async function renew(work) {
  if (work.dropped || work.renewing) return;
  work.renewing = true;
  try {
    const res = await retrying('renew', () => transport.renew(work.taskId, work.token), { attempts: 3 });
    log('renewed', {
      task: work.taskId,
      op_id: res.op_id,
      lease_expire_ms: timestampToMs(res.lease_expire_time),
      protocol_pending: res.protocol_pending,
    });
  } catch (err) {
    const e = errorDetails(err);
    if (work.completing) {
      // Crossed with the completion (which may have ended the claim already):
      // the completion's own answer says what became of the task.
    } else if (DROP_REASONS.has(e.reason)) {
      drop(work, e, 'RenewLease');
    } else {
      log('renew_error', { task: work.taskId, ...brief(err) });
    }
  } finally {
    work.renewing = false;
  }
}

function drop(work, e, during) {
  if (work.dropped) return;
  work.dropped = true;
  log('dropped', { task: work.taskId, during, code: e.code, reason: e.reason, details: e.details });
  if (work.wake) work.wake();
}

/** Sleep for the simulated work time, waking early if the task is dropped. */
function workDelay(work, ms) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    work.wake = () => {
      clearTimeout(timer);
      resolve();
    };
  });
}

function resultFor(task) {
  return Buffer.from(
    JSON.stringify({ by: 'node', teammate: NAME, task: task.id, deps: Array.from(task.depends_on || []) }),
    'utf8',
  );
}

async function doWork(work, task) {
  const renewEvery = Math.max(50, Math.floor(work.leaseMs / 3));
  work.timer = setInterval(() => track(renew(work)), renewEvery);
  try {
    if (WORK_MS > 0) await workDelay(work, WORK_MS);
    if (work.dropped) return;
    work.completing = true;
    const result = resultFor(task);
    const res = await retrying('complete', () => transport.complete(work.taskId, work.token, result));
    log('completed', { task: work.taskId, fence: work.fence, attempt: work.attempt, op_id: res.op_id });
  } catch (err) {
    const e = errorDetails(err);
    if (DROP_REASONS.has(e.reason)) {
      drop(work, e, 'CompleteTask');
    } else {
      log('complete_error', { task: work.taskId, ...brief(err) });
      // Hand the task back so someone else may take it.
      try {
        const error = `node teammate: ${e.details}`;
        await retrying('fail', () => transport.fail(work.taskId, work.token, error, true));
        log('failed', { task: work.taskId });
      } catch (err2) {
        log('fail_error', { task: work.taskId, ...brief(err2) });
      }
    }
  } finally {
    clearInterval(work.timer);
    held.delete(work.token);
    maybeAnswerShutdown();
  }
}

function onClaim(claim, afterOp) {
  const task = claim.task || {};
  if (seenClaimTokens.has(claim.claim_token)) {
    log('duplicate_claim', { task: task.id, attempt: claim.attempt, fence: claim.fence });
    return;
  }
  seenClaimTokens.add(claim.claim_token);
  const leaseMs =
    durationToMs(task.lease_duration) || Math.max(300, timestampToMs(claim.lease_expire_time) - Date.now());
  const work = {
    taskId: task.id,
    token: claim.claim_token,
    attempt: claim.attempt,
    fence: claim.fence,
    leaseMs,
    dropped: false,
    renewing: false,
    completing: false,
    timer: null,
    wake: null,
  };
  held.set(work.token, work);
  log('claimed', {
    task: task.id,
    attempt: claim.attempt,
    fence: claim.fence,
    lease_ms: leaseMs,
    depends_on: Array.from(task.depends_on || []),
    // A claim while a shutdown request waits would break design invariant 5.
    after_shutdown_request: shutdown !== null,
    // Session: the op whose result came in the same response (a completion
    // handing off the next claim), else null.
    after_op: afterOp,
  });
  track(doWork(work, task));
}

function onEvent(res, { afterOp }) {
  streamLostAt = 0;
  switch (res.event) {
    case 'message': {
      const m = res.message;
      log('message', { seq: Number(m.seq), sender: m.sender, body: m.body });
      ack(m.seq);
      break;
    }
    case 'plan_decision': {
      const d = res.plan_decision;
      log('plan_decision', { seq: Number(d.seq), plan_id: d.plan_id, approve: d.approve, feedback: d.feedback });
      ack(d.seq);
      break;
    }
    case 'shutdown_request': {
      const r = res.shutdown_request;
      log('shutdown_request', {
        seq: Number(r.seq),
        request_id: r.request_id,
        reason: r.reason,
        holding: held.size,
      });
      if (!shutdown || shutdown.request_id !== r.request_id) {
        shutdown = { request_id: r.request_id, responded: false };
      }
      // Acknowledge first, then answer once no task is held.
      ack(r.seq).then(maybeAnswerShutdown);
      break;
    }
    case 'claim':
      onClaim(res.claim, afterOp);
      break;
    case 'idle_timeout':
      idleTimedOut = true;
      log('idle_timeout', { idle_polls: res.idle_timeout.idle_polls });
      break;
    default:
      log('unknown_event', { event_name: String(res.event) });
  }
}

const openRequest = {
  max_idle_polls: MAX_IDLE_POLLS,
  poll_interval: POLL_INTERVAL_MS > 0 ? msToDuration(POLL_INTERVAL_MS) : null,
  slots: SLOTS,
};
const transport = new TRANSPORTS[TRANSPORT]({
  client,
  token: TOKEN,
  openRequest,
  onEvent,
  onEnd: onStreamEnd,
  onBroken: (what, fields) => {
    log(what, fields);
    finish(1, what);
  },
  log,
  opTimeoutMs: OP_TIMEOUT_MS,
});

function openStream() {
  log('stream_open', {
    transport: TRANSPORT,
    max_idle_polls: MAX_IDLE_POLLS,
    poll_interval_ms: POLL_INTERVAL_MS,
    slots: SLOTS,
  });
  transport.open();
}
async function settle() {
  // Wait for acks, renewals, work and answers still in flight.
  while (pending.size > 0) {
    await Promise.allSettled([...pending]);
  }
}

async function onStreamEnd(status) {
  const e = errorDetails(status);
  log('stream_end', { code: status.code, details: status.details, reason: e.reason });
  if (status.code === S.OK) {
    transport.abandon('the stream ended');
    await settle();
    const why = shutdown && shutdown.responded ? 'shutdown' : idleTimedOut ? 'idle_timeout' : 'stream_ended';
    finish(0, why);
  } else if (status.code === S.ABORTED) {
    // A newer stream with our identity superseded this one.
    finish(3, 'superseded');
  } else if (status.code === S.UNAUTHENTICATED || status.code === S.PERMISSION_DENIED) {
    transport.abandon('credential refused');
    await settle();
    finish(2, 'credential_refused');
  } else if (status.code === S.INVALID_ARGUMENT || status.code === S.UNIMPLEMENTED) {
    // Refused as we opened it (Session: first message not open, or a daemon
    // without Session): opening it again would get the same answer.
    transport.abandon('stream refused');
    await settle();
    finish(1, 'stream_refused');
  } else {
    // Broken stream (daemon restarting, network): reconnect. Claims we still
    // hold are re-sent on the new stream and deduped by claim token; on
    // Session, the ops not yet answered are sent again with their op ids.
    const now = Date.now();
    if (!streamLostAt) streamLostAt = now;
    if (now - streamLostAt > RECONNECT_MS) {
      transport.abandon('stream lost');
      await settle();
      finish(1, 'stream_lost');
      return;
    }
    await wait(200);
    if (!exiting) openStream();
  }
}

function finish(code, reason) {
  if (exiting) return;
  exiting = true;
  for (const work of held.values()) clearInterval(work.timer);
  transport.cancel();
  log('exit', { code, reason, completed_or_dropped: seenClaimTokens.size - held.size, holding: held.size });
  client.close();
  process.exit(code);
}

process.on('SIGTERM', () => finish(143, 'sigterm'));
process.on('SIGINT', () => finish(130, 'sigint'));

openStream();
