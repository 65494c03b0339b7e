'use strict';
// The OpenAPI 3.1 description of server.js, served at GET /openapi.json.
// The tests validate this document and check every response they receive
// against it.

const { PROBLEM_BASE, PROBLEM_TYPES } = require('./problems');

const ref = (name) => ({ $ref: `#/components/schemas/${name}` });
const nullable = (type, extra = {}) => ({ type: [type, 'null'], ...extra });
const json = (schema) => ({ 'application/json': { schema } });
const problemResponse = (description) => ({
  description, content: { 'application/problem+json': { schema: ref('Problem') } },
});
// the problems every route can answer
const common = {
  500: { $ref: '#/components/responses/InternalError' },
  503: { $ref: '#/components/responses/Unavailable' },
};
const idParam = (name, description) => ({
  name, in: 'path', required: true, description, schema: { type: 'string', pattern: '^[0-9]{1,15}$' },
});
const jobId = idParam('job_id', 'a job id');
const attemptId = idParam('attempt_id', 'an attempt id');
const replayed = {
  'Idempotent-Replayed': { description: 'present (true) when the response is a replay', schema: { const: 'true' } },
};

const transition = (summary, body, states) => ({
  post: {
    summary,
    parameters: [attemptId],
    ...(body ? { requestBody: { required: false, content: json(body) } } : {}),
    responses: {
      200: { description: 'the transition was made', content: json({
        type: 'object', required: ['state', 'attempt'], additionalProperties: false,
        properties: { state: { enum: states }, attempt: ref('Attempt') },
      }) },
      400: { $ref: '#/components/responses/BadRequest' },
      404: { $ref: '#/components/responses/NotFound' },
      409: { $ref: '#/components/responses/Conflict' },
      ...common,
    },
  },
});

const document = {
  openapi: '3.1.0',
  info: {
    title: 'jobguard HTTP API example',
    version: '1.0.0',
    description: 'Jobs submitted with an Idempotency-Key; attempts begun and reported by workers. ' +
      `Errors are RFC 9457 problem documents whose type is under ${PROBLEM_BASE} ` +
      '(GET it for a description) and whose title is the HTTP status phrase.',
  },
  paths: {
    '/jobs': {
      post: {
        summary: 'submit a job, or get the job this Idempotency-Key already names',
        parameters: [
          { name: 'Idempotency-Key', in: 'header', required: true,
            description: 'an RFC 8941 Structured Field String ("k-2"); a bare Token (k-2) names the same key',
            schema: { type: 'string' } },
          { name: 'X-Owner-Id', in: 'header', required: true, schema: { type: 'string' },
            description: 'the owner (in a real service: from authentication)' },
          { name: 'Prefer', in: 'header', required: false, schema: { type: 'string' },
            description: 'wait=0: answer 409 request-in-progress instead of waiting for a concurrent request with the same key' },
        ],
        requestBody: { required: true, content: json(ref('JobRequest')) },
        responses: {
          201: { description: 'the job was created',
            headers: { Location: { schema: { type: 'string' } } }, content: json(ref('Job')) },
          200: { description: 'a replay: the job this key names, in its current state',
            headers: { Location: { schema: { type: 'string' } }, ...replayed }, content: json(ref('Job')) },
          400: { $ref: '#/components/responses/BadRequest' },
          409: { $ref: '#/components/responses/Conflict' },
          413: problemResponse('the body is larger than 1 MiB'),
          422: { $ref: '#/components/responses/Unprocessable' },
          ...common,
        },
      },
    },
    '/jobs/{job_id}': {
      get: {
        summary: 'a job with its attempts',
        parameters: [jobId],
        responses: {
          200: { description: 'the job', content: json({ allOf: [ref('Job'), {
            type: 'object', required: ['attempts_list'],
            properties: { attempts_list: { type: 'array', items: ref('Attempt') } } }] }) },
          404: { $ref: '#/components/responses/NotFound' },
          ...common,
        },
      },
    },
    '/jobs/{job_id}/attempts': {
      post: {
        summary: 'begin the next attempt of a job',
        parameters: [jobId],
        requestBody: { required: false, content: json({
          type: 'object',
          properties: {
            provider: { type: 'string' },
            timeout_seconds: { type: 'number' },
            attempt_key: { type: 'string' },
          },
        }) },
        responses: {
          201: { description: 'the attempt began',
            headers: { Location: { schema: { type: 'string' } } }, content: json(ref('Attempt')) },
          200: { description: 'attempt_key named the job\'s open attempt: that attempt',
            headers: replayed, content: json(ref('Attempt')) },
          400: { $ref: '#/components/responses/BadRequest' },
          404: { $ref: '#/components/responses/NotFound' },
          409: { $ref: '#/components/responses/Conflict' },
          422: { $ref: '#/components/responses/Unprocessable' },
          ...common,
        },
      },
    },
    '/attempts/{attempt_id}/finish': {
      post: {
        summary: 'report the attempt\'s result (the body is the result)',
        parameters: [attemptId],
        requestBody: { required: true, content: json({}) },
        responses: {
          200: { description: 'the report was recorded; outcome says what became of it', content: json({
            type: 'object', required: ['outcome', 'attempt'], additionalProperties: false,
            properties: { outcome: { enum: ['won', 'lost', 'rejected'] }, attempt: ref('Attempt') },
          }) },
          400: { $ref: '#/components/responses/BadRequest' },
          404: { $ref: '#/components/responses/NotFound' },
          409: { $ref: '#/components/responses/Conflict' },
          422: { $ref: '#/components/responses/Unprocessable' },
          ...common,
        },
      },
    },
    '/attempts/{attempt_id}/fail': transition('report that the attempt failed',
      { type: 'object', properties: { error: { type: 'string' } } }, ['failed']),
    '/attempts/{attempt_id}/cancel': transition('stop waiting for the attempt',
      { type: 'object', properties: { reason: { type: 'string' } } }, ['cancelled']),
    '/attempts/{attempt_id}/unknown': transition('record that the caller saw a timeout', null, ['unknown']),
    '/openapi.json': {
      get: {
        summary: 'this document',
        responses: { 200: { description: 'the OpenAPI document', content: json({ type: 'object' }) } },
      },
    },
    '/problems/{name}': {
      get: {
        summary: 'what a problem type means',
        parameters: [{ name: 'name', in: 'path', required: true,
          schema: { enum: Object.keys(PROBLEM_TYPES) } }],
        responses: {
          200: { description: 'the description', content: { 'text/plain': { schema: { type: 'string' } } } },
          404: { $ref: '#/components/responses/NotFound' },
        },
      },
    },
  },
  components: {
    schemas: {
      JobRequest: {
        type: 'object',
        properties: {
          operation: { type: 'string' },
          params: { description: 'any JSON value' },
          provider: { type: 'string' },
          max_attempts: nullable('integer'),
        },
      },
      Job: {
        type: 'object',
        required: ['job_id', 'owner_id', 'idempotency_key', 'operation', 'provider', 'params',
          'max_attempts', 'state', 'version', 'attempts', 'completed_by', 'result', 'created_at',
          'completed_at', 'cancelled_at'],
        properties: {
          job_id: { type: 'integer' },
          owner_id: { type: 'string' },
          idempotency_key: { type: 'string' },
          operation: { type: 'string' },
          provider: { type: 'string' },
          params: {},
          max_attempts: nullable('integer'),
          state: { enum: ['pending', 'running', 'unknown', 'succeeded', 'failed', 'cancelled'] },
          version: { type: 'integer' },
          attempts: { type: 'integer', minimum: 0 },
          completed_by: nullable('integer'),
          result: {},
          created_at: { type: 'string', format: 'date-time' },
          completed_at: nullable('string', { format: 'date-time' }),
          cancelled_at: nullable('string', { format: 'date-time' }),
          attempts_list: { type: 'array', items: ref('Attempt') },
        },
        // open: a later jobguard version may add columns
      },
      Attempt: {
        type: 'object',
        required: ['attempt_id', 'job_id', 'attempt_no', 'provider', 'state', 'read_version',
          'attempt_key', 'started_at', 'deadline', 'finished_at', 'error', 'lost_to',
          'lost_result', 'cancelled_at', 'cancel_reason'],
        properties: {
          attempt_id: { type: 'integer' },
          job_id: { type: 'integer' },
          attempt_no: { type: 'integer', minimum: 1 },
          provider: { type: 'string' },
          state: { enum: ['started', 'unknown', 'cancelled', 'succeeded', 'lost', 'failed'] },
          read_version: { type: 'integer' },
          attempt_key: nullable('string'),
          started_at: { type: 'string', format: 'date-time' },
          deadline: { type: 'string', format: 'date-time' },
          finished_at: nullable('string', { format: 'date-time' }),
          error: nullable('string'),
          lost_to: nullable('integer'),
          lost_result: {},
          cancelled_at: nullable('string', { format: 'date-time' }),
          cancel_reason: nullable('string'),
        },
        // open: a later jobguard version may add columns
      },
      Problem: {
        type: 'object',
        required: ['type', 'title', 'status', 'detail'],
        properties: {
          type: { type: 'string', format: 'uri-reference', pattern: `^${PROBLEM_BASE}[a-z-]+$` },
          title: { type: 'string' },
          status: { type: 'integer' },
          detail: { type: 'string' },
          sqlstate: { type: 'string', pattern: '^[0-9A-Z]{5}$' },
          condition: { type: 'string' },
          pg_detail: { type: 'string' },
          hint: { type: 'string' },
          blocking_attempt: {
            type: 'object', required: ['attempt_id', 'state', 'deadline'],
            properties: { attempt_id: { type: 'integer' }, state: { type: 'string' },
              deadline: { type: 'string', format: 'date-time' } },
          },
        },
        additionalProperties: false,
      },
    },
    responses: {
      BadRequest: problemResponse('invalid-argument, missing- or invalid-idempotency-key, missing-owner, invalid-json, invalid-body'),
      NotFound: problemResponse('job-not-found, attempt-not-found, not-found'),
      Conflict: problemResponse('attempt-in-flight, job-closed, attempts-exhausted, invalid-transition, request-in-progress'),
      Unprocessable: problemResponse('idempotency-key-reused, provider-not-certified, result-mismatch'),
      InternalError: problemResponse('internal-error'),
      Unavailable: {
        description: 'database-unavailable or try-again: retry after Retry-After seconds',
        headers: { 'Retry-After': { schema: { type: 'string' } } },
        content: { 'application/problem+json': { schema: ref('Problem') } },
      },
    },
  },
};

module.exports = { document };
