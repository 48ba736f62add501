'use strict';
// The Session transport: one bidirectional stream carrying the Idle events
// and the claim ops (ack, renew, complete, fail), each op with an op_id.
// The same face as idle.js.
//
// What the daemon promises (SessionRequest in proto/corral/v1/corral.proto):
// each op gets exactly one op_result, in the order the ops were sent, once
// its transaction has committed; an op sent again with the same op_id gets the
// recorded outcome instead of running again. So this keeps every op it sent
// and has not yet seen answered, oldest first, and after a broken stream sends
// them all again, the same ids and the same bodies, right after the next `open`.

const crypto = require('node:crypto');
const { bearer } = require('./corral');
const { OpError } = require('./rpc_status');

const CANCELLED = 1;
const OK = 0;

// Runs `fn` after everything queued before it: responses and the stream's
// end are handled one at a time, in the order they arrived.
function serializer() {
  let tail = Promise.resolve();
  return (fn) => {
    tail = tail.then(fn).catch((err) => process.nextTick(() => { throw err; }));
  };
}

function notAnswered(kind, opId, reason) {
  return new OpError(kind, opId, { code: CANCELLED, message: `not answered: ${reason}` });
}

class SessionTransport {
  constructor({ client, token, openRequest, onEvent, onEnd, onBroken, log, opTimeoutMs }) {
    this.name = 'session';
    this.client = client;
    this.token = token;
    this.openRequest = openRequest;
    this.onEvent = onEvent;
    this.onEnd = onEnd;
    this.onBroken = onBroken; // the daemon broke the Session contract: the caller gives up
    this.log = log;
    this.opTimeoutMs = opTimeoutMs;
    // Unique per teammate across restarts of this program too, which a
    // counter alone is not: the daemon keeps op outcomes for 24 hours.
    this.opPrefix = crypto.randomBytes(8).toString('hex');
    this.opCount = 0;
    this.unanswered = []; // [{ opId, kind, request, resolve, reject, sentAt }], oldest first
    this.stream = null;
    this.abandoned = ''; // why no stream will follow, once the caller gives up
    this.inOrder = serializer();
    this.timer = setInterval(() => this.checkOpTimeout(), Math.max(50, Math.floor(opTimeoutMs / 4)));
    this.timer.unref();
  }

  open() {
    const s = this.client.Session(bearer(this.token));
    this.stream = s;
    s.on('data', (response) => this.inOrder(() => this.onResponse(s, response)));
    s.on('error', () => {}); // the final status (OK or not) is handled in 'status'
    s.on('status', (status) =>
      this.inOrder(() => {
        if (this.stream === s) this.stream = null;
        this.onEnd(status); // not awaited: it may wait for ops that only a next stream answers
      }),
    );
    s.write({ open: this.openRequest });
    for (const op of this.unanswered) {
      this.log('op_resent', { op_id: op.opId, kind: op.kind });
      this.send(op);
    }
  }

  send(op) {
    op.sentAt = Date.now();
    this.stream.write(op.request);
  }

  /** Sends one op now, or on the next stream if none is open; a promise of its op result. */
  op(kind, body) {
    this.opCount += 1;
    const opId = `${this.opPrefix}-${this.opCount}`;
    if (this.abandoned) return Promise.reject(notAnswered(kind, opId, this.abandoned));
    return new Promise((resolve, reject) => {
      const op = { opId, kind, request: { op_id: opId, [kind]: body }, resolve, reject, sentAt: 0 };
      this.unanswered.push(op);
      if (this.stream) this.send(op);
    });
  }

  /** Cancels the stream and ignores what it still delivers: its unanswered ops go again on the next. */
  breakStream() {
    const s = this.stream;
    this.stream = null; // ops from now on wait for the next stream
    s.givenUp = true;
    s.cancel();
  }

  async onResponse(s, response) {
    if (s.givenUp) return;
    let afterOp = null;
    if (response.op_result) {
      afterOp = response.op_result.op_id;
      if (!this.settle(response.op_result)) return;
      // The op result first, then the event that came with it: let the code
      // that awaited the op run to its next wait, so that a claim handed off
      // with a completion's result finds that task finished.
      await new Promise(setImmediate);
    }
    if (response.event) this.onEvent(response, { afterOp });
  }

  settle(result) {
    const op = this.unanswered[0];
    if (!op || op.opId !== result.op_id) {
      this.onBroken('op_result_out_of_order', { op_id: result.op_id, expected: op ? op.opId : null });
      return false;
    }
    this.unanswered.shift();
    const status = result.status || { code: OK };
    if (Number(status.code || 0) === OK) op.resolve(result);
    else op.reject(new OpError(op.kind, op.opId, status));
    return true;
  }

  // An op unanswered for too long: the stream is as good as broken. Cancel
  // it; the reconnect sends the op again.
  checkOpTimeout() {
    const oldest = this.unanswered[0];
    if (!this.stream || !oldest || !oldest.sentAt) return;
    if (Date.now() - oldest.sentAt < this.opTimeoutMs) return;
    this.log('op_timeout', { op_id: oldest.opId, kind: oldest.kind, waited_ms: Date.now() - oldest.sentAt });
    oldest.sentAt = 0;
    this.breakStream();
  }

  ack(seq) {
    return this.op('ack', { through_seq: String(seq) });
  }

  renew(taskId, claimToken) {
    return this.op('renew', { task_id: taskId, claim_token: claimToken });
  }

  complete(taskId, claimToken, result) {
    return this.op('complete', { task_id: taskId, claim_token: claimToken, result });
  }

  fail(taskId, claimToken, error, retryable) {
    return this.op('fail', { task_id: taskId, claim_token: claimToken, error, retryable });
  }

  abandon(reason) {
    this.abandoned = reason;
    for (const op of this.unanswered.splice(0)) op.reject(notAnswered(op.kind, op.opId, reason));
  }

  cancel() {
    clearInterval(this.timer);
    if (this.stream) this.stream.cancel();
  }
}

module.exports = { SessionTransport };
