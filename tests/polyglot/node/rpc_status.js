'use strict';
// Rich gRPC error details without extra dependencies.
//
// A failed call may carry trailing metadata `grpc-status-details-bin`: a
// serialized google.rpc.Status. A Session op result carries the same message
// as its `status` field (proto-loader decodes that one for us; its `details`
// stay Any values with raw bytes, read here like the trailer's). Its `details` are google.protobuf.Any values;
// corral puts a google.rpc.ErrorInfo (reason, domain "corral") on every domain
// error, plus BadRequest / RetryInfo where they apply. We only need a handful
// of fields, so this is a tiny hand-written protobuf reader:
//
//   google.rpc.Status     { int32 code = 1; string message = 2; repeated Any details = 3; }
//   google.protobuf.Any   { string type_url = 1; bytes value = 2; }
//   google.rpc.ErrorInfo  { string reason = 1; string domain = 2; map<string,string> metadata = 3; }
//   google.rpc.BadRequest { repeated FieldViolation field_violations = 1; }
//     FieldViolation      { string field = 1; string description = 2; }
//   google.rpc.RetryInfo  { google.protobuf.Duration retry_delay = 1; }
//   google.protobuf.Duration { int64 seconds = 1; int32 nanos = 2; }

const TYPE_PREFIX = 'type.googleapis.com/';

// Yields [fieldNumber, wireType, value] for each field of a message buffer.
// value: a BigInt for varints, a Buffer for length-delimited fields.
function* fields(buf) {
  let pos = 0;
  const varint = () => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      if (pos >= buf.length) throw new Error('truncated varint');
      const b = buf[pos++];
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
      if (shift > 63n) throw new Error('varint too long');
    }
  };
  while (pos < buf.length) {
    const key = Number(varint());
    const field = key >>> 3;
    const wire = key & 7;
    if (wire === 0) {
      yield [field, wire, varint()];
    } else if (wire === 2) {
      const len = Number(varint());
      if (pos + len > buf.length) throw new Error('truncated field');
      yield [field, wire, buf.subarray(pos, pos + len)];
      pos += len;
    } else if (wire === 1) {
      pos += 8; // fixed64: not used by these messages, skipped
    } else if (wire === 5) {
      pos += 4; // fixed32: skipped
    } else {
      throw new Error(`unsupported wire type ${wire}`);
    }
  }
}

function decodeErrorInfo(buf) {
  const info = { reason: '', domain: '', metadata: {} };
  for (const [f, w, v] of fields(buf)) {
    if (w !== 2) continue;
    if (f === 1) info.reason = v.toString('utf8');
    else if (f === 2) info.domain = v.toString('utf8');
    else if (f === 3) {
      let key = '';
      let value = '';
      for (const [ef, ew, ev] of fields(v)) {
        if (ew !== 2) continue;
        if (ef === 1) key = ev.toString('utf8');
        else if (ef === 2) value = ev.toString('utf8');
      }
      info.metadata[key] = value;
    }
  }
  return info;
}

function decodeBadRequest(buf) {
  const violations = [];
  for (const [f, w, v] of fields(buf)) {
    if (f !== 1 || w !== 2) continue;
    const fv = { field: '', description: '' };
    for (const [ff, fw, fval] of fields(v)) {
      if (fw !== 2) continue;
      if (ff === 1) fv.field = fval.toString('utf8');
      else if (ff === 2) fv.description = fval.toString('utf8');
    }
    violations.push(fv);
  }
  return { field_violations: violations };
}

function decodeRetryInfo(buf) {
  let ms = 0;
  for (const [f, w, v] of fields(buf)) {
    if (f !== 1 || w !== 2) continue;
    let seconds = 0n;
    let nanos = 0n;
    for (const [df, dw, dv] of fields(v)) {
      if (dw !== 0) continue;
      if (df === 1) seconds = dv;
      else if (df === 2) nanos = dv;
    }
    ms = Number(seconds) * 1000 + Number(nanos) / 1e6;
  }
  return { retry_delay_ms: ms };
}

/** Decodes a serialized google.rpc.Status into a plain object. */
function decodeStatus(buf) {
  const status = { code: 0, message: '', details: [] };
  for (const [f, w, v] of fields(buf)) {
    if (f === 1 && w === 0) status.code = Number(v);
    else if (f === 2 && w === 2) status.message = v.toString('utf8');
    else if (f === 3 && w === 2) {
      let typeUrl = '';
      let value = Buffer.alloc(0);
      for (const [af, aw, av] of fields(v)) {
        if (aw !== 2) continue;
        if (af === 1) typeUrl = av.toString('utf8');
        else if (af === 2) value = av;
      }
      status.details.push({ type_url: typeUrl, value });
    }
  }
  return status;
}

function typeName(typeUrl) {
  return typeUrl.startsWith(TYPE_PREFIX) ? typeUrl.slice(TYPE_PREFIX.length) : typeUrl;
}

/**
 * Everything useful about a google.rpc.Status, decoded ({code, message,
 * details: [{type_url, value}]}, as decodeStatus and @grpc/proto-loader give it):
 * { code, details, reason, domain, metadata, field_violations, retry_delay_ms }.
 * `reason` is '' when the status carries no ErrorInfo.
 */
function statusDetails(status) {
  const out = { code: Number(status.code || 0), details: status.message || '', reason: '', domain: '', metadata: {} };
  addDetails(out, status.details || []);
  return out;
}

function addDetails(out, details) {
  for (const d of details) {
    const value = Buffer.isBuffer(d.value) ? d.value : Buffer.from(d.value || []);
    try {
      const type = typeName(d.type_url || '');
      if (type === 'google.rpc.ErrorInfo') Object.assign(out, decodeErrorInfo(value));
      else if (type === 'google.rpc.BadRequest') out.field_violations = decodeBadRequest(value).field_violations;
      else if (type === 'google.rpc.RetryInfo') out.retry_delay_ms = decodeRetryInfo(value).retry_delay_ms;
    } catch (e) {
      out.decode_error = String(e.message || e);
    }
  }
}

/** A Session op answered with a status other than OK. */
class OpError extends Error {
  constructor(kind, opId, status) {
    super(`${kind} op ${opId}: ${status.message || `status ${status.code}`}`);
    this.kind = kind;
    this.opId = opId;
    this.status = status;
    this.code = Number(status.code || 0);
    this.details = status.message || '';
  }
}

/**
 * The same for a failure: a failed grpc-js call (its Status travels in the
 * trailer `grpc-status-details-bin`) or an OpError (its Status is a Session
 * op result's `status`).
 */
function errorDetails(err) {
  if (err instanceof OpError) return statusDetails(err.status);
  const out = {
    code: typeof err.code === 'number' ? err.code : 2,
    details: err.details || err.message || '',
    reason: '',
    domain: '',
    metadata: {},
  };
  const md = err.metadata;
  const raw = md && typeof md.get === 'function' ? md.get('grpc-status-details-bin') : [];
  for (const item of raw) {
    let status;
    try {
      status = decodeStatus(Buffer.isBuffer(item) ? item : Buffer.from(String(item), 'base64'));
    } catch (e) {
      out.decode_error = String(e.message || e);
      continue;
    }
    addDetails(out, status.details);
  }
  return out;
}

module.exports = {
  decodeStatus,
  decodeErrorInfo,
  decodeBadRequest,
  decodeRetryInfo,
  statusDetails,
  errorDetails,
  OpError,
};
