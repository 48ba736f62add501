'use strict';
// The Idle transport: a server stream for the events, a unary call per claim op.
//
// Every transport has the same face (session.js is the other one):
//   open()                                  open a stream; events go to onEvent(response, {afterOp}),
//                                           its final status to onEnd(status)
//   ack(seq), renew(taskId, token),
//   complete(taskId, token, result),
//   fail(taskId, token, error, retryable)   one attempt each; a promise of the reply,
//                                           rejected with something errorDetails() reads
//   abandon(reason)                         no stream will follow: fail what still waits for one
//   cancel()                                end the stream now (the process is exiting)

const { bearer, unary } = require('./corral');

class IdleTransport {
  constructor({ client, token, openRequest, onEvent, onEnd }) {
    this.name = 'idle';
    this.client = client;
    this.token = token;
    this.openRequest = openRequest;
    this.onEvent = onEvent;
    this.onEnd = onEnd;
    this.stream = null;
  }

  open() {
    const s = this.client.Idle(this.openRequest, bearer(this.token));
    this.stream = s;
    s.on('data', (response) => this.onEvent(response, { afterOp: null }));
    s.on('error', () => {}); // the final status (OK or not) is handled in 'status'
    s.on('status', (status) => {
      if (this.stream === s) this.stream = null;
      this.onEnd(status);
    });
  }

  call(method, request) {
    return unary(this.client, method, request, bearer(this.token));
  }

  ack(seq) {
    return this.call('AckMessages', { through_seq: String(seq) });
  }

  renew(taskId, claimToken) {
    return this.call('RenewLease', { task_id: taskId, claim_token: claimToken });
  }

  complete(taskId, claimToken, result) {
    return this.call('CompleteTask', { task_id: taskId, claim_token: claimToken, result });
  }

  fail(taskId, claimToken, error, retryable) {
    return this.call('FailTask', { task_id: taskId, claim_token: claimToken, error, retryable });
  }

  abandon() {} // unary calls do not wait for a stream

  cancel() {
    if (this.stream) this.stream.cancel();
  }
}

module.exports = { IdleTransport };
