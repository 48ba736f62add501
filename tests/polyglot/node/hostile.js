#!/usr/bin/env node
'use strict';
// A malicious client holding a teammate's credential. Every attempt here must
// be refused by the daemon with a definite status; none may change the board.
//
// Environment (or argv: hostile.js [FOREIGN_TASK FOREIGN_CLAIM_TOKEN]):
//   CORRAL_ADDRESS               grpc-js target, e.g. unix:/abs/path/corral.sock
//   CORRAL_TOKEN                 the hostile teammate's own (valid) credential
//   CORRAL_FOREIGN_TASK          a task another teammate holds a live claim on
//   CORRAL_FOREIGN_CLAIM_TOKEN   that other teammate's claim token
//   CORRAL_HOSTILE_CLAIM         "0" to skip taking a claim of its own (default "1")
//
// stdout: one JSON line per attempt:
//   {"attempt": "...", "code": <numeric grpc status>, "reason": "<ErrorInfo reason or ''>", ...}
// Exit 0 once every attempt ran (the verdicts are the caller's business).

const crypto = require('node:crypto');
const { grpc, loadContract, requireEnv, bearer, deadline, unary, timestampToMs } = require('./corral');
const { errorDetails } = require('./rpc_status');

const ADDRESS = requireEnv('CORRAL_ADDRESS');
const TOKEN = requireEnv('CORRAL_TOKEN');
const FOREIGN_TASK = process.argv[2] || process.env.CORRAL_FOREIGN_TASK || '';
const FOREIGN_CLAIM_TOKEN = process.argv[3] || process.env.CORRAL_FOREIGN_CLAIM_TOKEN || '';
const TAKE_OWN_CLAIM = (process.env.CORRAL_HOSTILE_CLAIM || '1') !== '0';

const { packageDefinition, v1 } = loadContract();
const insecure = grpc.credentials.createInsecure();
const lead = new v1.LeadService(ADDRESS, insecure);
const teammate = new v1.TeammateService(ADDRESS, insecure);
const board = new v1.BoardService(ADDRESS, insecure);
const raw = new grpc.Client(ADDRESS, insecure);

const TEAMMATE_SERVICE = 'corral.v1.TeammateService';

function report(attempt, outcome, extra = {}) {
  process.stdout.write(`${JSON.stringify({ attempt, ...outcome, ...extra })}\n`);
}

/** Runs one call; returns {code, reason, details, response?} without throwing. */
async function outcomeOf(promise) {
  try {
    const response = await promise;
    return { code: 0, reason: '', details: '', response };
  } catch (err) {
    const e = errorDetails(err);
    const out = { code: e.code, reason: e.reason, details: e.details };
    if (e.domain) out.domain = e.domain;
    if (e.field_violations) out.field_violations = e.field_violations;
    return out;
  }
}

async function attempt(name, promise, extra = {}) {
  const { response, ...outcome } = await outcomeOf(promise);
  report(name, outcome, extra);
  return { ...outcome, response };
}

/** Encode `request` exactly as the schema says. */
function encodeKnown(method, request) {
  return packageDefinition[TEAMMATE_SERVICE][method].requestSerialize(request);
}

/** Encode `request` as the schema says, then append field 15 (string), which the schema does not have. */
function withUnknownField(method, request, fieldNumber = 15, value = 'mallory') {
  const known = encodeKnown(method, request);
  const payload = Buffer.from(value, 'utf8');
  const tag = (fieldNumber << 3) | 2; // wire type 2: length-delimited
  if (tag > 127 || payload.length > 127) throw new Error('keep the hand-encoded field small');
  return Buffer.concat([known, Buffer.from([tag, payload.length]), payload]);
}

/** A unary call with hand-made request bytes, through grpc-js's generic client. */
function rawUnary(method, bytes, metadata) {
  return new Promise((resolve, reject) => {
    raw.makeUnaryRequest(
      `/${TEAMMATE_SERVICE}/${method}`,
      (buf) => buf, // the request is already serialized
      (buf) => buf, // keep the reply as bytes
      bytes,
      metadata,
      { deadline: deadline(10000) },
      (err, res) => (err ? reject(err) : resolve(res)),
    );
  });
}

/** Open an Idle stream with our own credential and wait for one claim (or give up). */
function takeOwnClaim(timeoutMs = 10000) {
  return new Promise((resolve) => {
    const stream = teammate.Idle(
      { max_idle_polls: 100, poll_interval: { seconds: '0', nanos: 100000000 }, slots: 1 },
      bearer(TOKEN),
    );
    let done = false;
    const settle = (value) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      stream.cancel(); // the claim outlives the stream (until its lease ends)
      resolve(value);
    };
    const timer = setTimeout(() => settle({ error: 'no claim within timeout' }), timeoutMs);
    stream.on('data', (res) => {
      if (res.event === 'claim') settle({ claim: res.claim });
    });
    stream.on('error', (err) => settle({ error: errorDetails(err) }));
    stream.on('status', () => settle({ error: 'stream ended without a claim' }));
  });
}

async function main() {
  const me = bearer(TOKEN);

  // 1. Lead-only RPCs with a teammate credential.
  await attempt(
    'lead_create_tasks',
    unary(lead, 'CreateTasks', { tasks: [{ id: 'mallory-task', title: 'forged by a teammate' }] }, me),
  );
  await attempt('lead_add_teammate', unary(lead, 'AddTeammate', { name: 'mallory' }, me));

  // 2. No credential / a made-up credential.
  await attempt('no_token', unary(board, 'ListTasks', {}, bearer(null)));
  await attempt(
    'no_token_complete',
    unary(teammate, 'CompleteTask', { task_id: FOREIGN_TASK || 'x', claim_token: 'x' }, bearer(null)),
  );
  await attempt('bogus_token', unary(board, 'ListTasks', {}, bearer(crypto.randomBytes(24).toString('hex'))));

  // 3. Another teammate's live claim, presented with our credential.
  if (FOREIGN_TASK && FOREIGN_CLAIM_TOKEN) {
    await attempt(
      'foreign_claim_complete',
      unary(
        teammate,
        'CompleteTask',
        { task_id: FOREIGN_TASK, claim_token: FOREIGN_CLAIM_TOKEN, result: Buffer.from('pwned') },
        me,
      ),
      { task: FOREIGN_TASK },
    );
    await attempt(
      'foreign_claim_renew',
      unary(teammate, 'RenewLease', { task_id: FOREIGN_TASK, claim_token: FOREIGN_CLAIM_TOKEN }, me),
      { task: FOREIGN_TASK },
    );
    await attempt(
      'foreign_claim_release',
      unary(teammate, 'ReleaseTask', { task_id: FOREIGN_TASK, claim_token: FOREIGN_CLAIM_TOKEN }, me),
      { task: FOREIGN_TASK },
    );
  }

  // 4. Unknown fields. With a claim of our own the request would otherwise
  //    succeed, so a refusal can only be about the extra field.
  let own = null;
  if (TAKE_OWN_CLAIM) {
    const got = await takeOwnClaim();
    if (got.claim) {
      own = { task: got.claim.task.id, token: got.claim.claim_token };
      report('own_claim', { code: 0, reason: '' }, {
        task: own.task,
        owner: got.claim.task.owner,
        lease_expire_ms: timestampToMs(got.claim.lease_expire_time),
      });
    } else {
      report('own_claim', { code: -1, reason: '' }, { error: got.error });
    }
  }
  const target = own || (FOREIGN_TASK ? { task: FOREIGN_TASK, token: FOREIGN_CLAIM_TOKEN } : null);
  if (target) {
    const whose = own ? 'own' : 'foreign';
    // Control: the same hand-encoded path without the extra field is accepted
    // (for our own claim; a foreign one gets CLAIM_TOKEN_MISMATCH).
    await attempt(
      'raw_renew_known_fields',
      rawUnary('RenewLease', encodeKnown('RenewLease', { task_id: target.task, claim_token: target.token }), me),
      { task: target.task, claim: whose },
    );
    await attempt(
      'unknown_field_renew',
      rawUnary('RenewLease', withUnknownField('RenewLease', { task_id: target.task, claim_token: target.token }), me),
      { task: target.task, claim: whose, field: 15 },
    );
    await attempt(
      'unknown_field_complete',
      rawUnary(
        'CompleteTask',
        withUnknownField('CompleteTask', {
          task_id: target.task,
          claim_token: target.token,
          result: Buffer.from('{"by":"mallory"}'),
        }),
        me,
      ),
      { task: target.task, claim: whose, field: 15 },
    );
    // What the board says after the forgeries: still in progress, same owner, no result.
    const got = await outcomeOf(unary(board, 'GetTask', { task_id: target.task }, me));
    // GetTaskRequest's first spelling, `id`, still works.
    const old = await outcomeOf(unary(board, 'GetTask', { id: target.task }, me));
    report('get_task_by_id', { code: old.code, reason: old.reason }, {
      task: old.response ? old.response.task.id : null,
    });
    const task = got.response ? got.response.task : null;
    report('after_forgery', { code: got.code, reason: got.reason }, {
      task: target.task,
      state: task ? task.state : null,
      owner: task ? task.owner : null,
      result: task ? Buffer.from(task.result || []).toString('utf8') : null,
    });
  }
  if (own) {
    await attempt(
      'made_up_claim_token',
      unary(teammate, 'CompleteTask', { task_id: own.task, claim_token: crypto.randomBytes(16).toString('hex'), result: Buffer.from('x') }, me),
      { task: own.task },
    );
    // Give our task back so the board can finish without us.
    await attempt('release_own', unary(teammate, 'ReleaseTask', { task_id: own.task, claim_token: own.token }, me), {
      task: own.task,
    });
  }

  for (const c of [lead, teammate, board, raw]) c.close();
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`hostile.js crashed: ${err && err.stack ? err.stack : err}\n`);
    process.exit(1);
  },
);
