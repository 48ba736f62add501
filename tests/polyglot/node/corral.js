'use strict';
// Shared plumbing for the Node programs: load the contract at run time (no
// generated code, no build step), connect, and attach the bearer credential.

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// tests/polyglot/node -> repo root -> proto/
const PROTO_ROOT = path.resolve(__dirname, '..', '..', '..', 'proto');
const PROTO_FILE = 'corral/v1/corral.proto';

const LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  // corral.proto imports google/protobuf/{duration,timestamp}.proto: protobufjs
  // ships those well-known types (and Any) built in, and PROTO_ROOT resolves
  // google/rpc/status.proto, which proto/ declares beside corral.v1.
  includeDirs: [PROTO_ROOT],
};

function loadContract() {
  const packageDefinition = protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS);
  const loaded = grpc.loadPackageDefinition(packageDefinition);
  return { packageDefinition, v1: loaded.corral.v1 };
}

function requireEnv(name) {
  const value = process.env[name];
  if (!value) {
    process.stderr.write(`${name} is not set\n`);
    process.exit(64);
  }
  return value;
}

function intEnv(name, fallback) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) {
    process.stderr.write(`${name} must be a non-negative number, got ${JSON.stringify(raw)}\n`);
    process.exit(64);
  }
  return Math.floor(n);
}

/** Per-call metadata carrying `authorization: Bearer <token>` (omitted when token is null). */
function bearer(token) {
  const md = new grpc.Metadata();
  if (token !== null && token !== undefined) md.set('authorization', `Bearer ${token}`);
  return md;
}

function deadline(ms) {
  return new Date(Date.now() + ms);
}

/** Promise wrapper around a grpc-js unary method. */
function unary(client, method, request, metadata, timeoutMs = 10000) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata, { deadline: deadline(timeoutMs) }, (err, response) => {
      if (err) reject(err);
      else resolve(response);
    });
  });
}

const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function durationToMs(d) {
  if (!d) return 0;
  return Number(d.seconds || 0) * 1000 + Number(d.nanos || 0) / 1e6;
}

function timestampToMs(t) {
  if (!t) return 0;
  return Number(t.seconds || 0) * 1000 + Number(t.nanos || 0) / 1e6;
}

function msToDuration(ms) {
  const seconds = Math.floor(ms / 1000);
  return { seconds: String(seconds), nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

/** One JSON object per line on stdout: the pytest side parses these. */
function log(event, fields = {}) {
  process.stdout.write(`${JSON.stringify({ event, ts: new Date().toISOString(), ...fields })}\n`);
}

module.exports = {
  grpc,
  PROTO_ROOT,
  loadContract,
  requireEnv,
  intEnv,
  bearer,
  deadline,
  unary,
  wait,
  durationToMs,
  timestampToMs,
  msToDuration,
  log,
};
