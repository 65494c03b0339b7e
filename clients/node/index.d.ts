// Types of the jobguard Node.js client (index.js, errors.js), written by hand.

import { DatabaseError } from 'pg';

/** A job id: a number that the type checker keeps apart from attempt ids. */
export type JobId = number & { readonly __jobguard: 'JobId' };
/** An attempt id: a number that the type checker keeps apart from job ids. */
export type AttemptId = number & { readonly __jobguard: 'AttemptId' };

/** Any value that JSON.stringify accepts; stored as jsonb. */
export type Json = unknown;

export type JobState = 'pending' | 'running' | 'unknown' | 'succeeded' | 'failed' | 'cancelled';
export type AttemptState = 'started' | 'unknown' | 'cancelled' | 'succeeded' | 'lost' | 'failed';
export type Outcome = 'won' | 'lost' | 'rejected';

/** A pg Pool, Client or PoolClient. */
export interface Queryable {
  query(config: { text: string; values?: unknown[]; types?: unknown }): Promise<{ rows: any[] }>;
}

export interface SubmitRequest {
  ownerId: string;
  idempotencyKey: string;
  operation: string;
  params: Json;
  provider: string;
  maxAttempts?: number | null;
}

export interface Submitted {
  jobId: JobId;
  /** true for the one call that created the job, false for a replay */
  created: boolean;
}

export interface BeginOptions {
  /** the provider to try; default the job's own (another must be certified) */
  provider?: string | null;
  /** the attempt's deadline, in seconds from now; default 30 */
  timeoutSeconds?: number;
  /** a retried begin with the key of the job's open attempt gets that attempt */
  attemptKey?: string | null;
}

/** A row of jobguard.job() (column names as in SQL). */
export interface Job {
  job_id: JobId;
  owner_id: string;
  idempotency_key: string;
  operation: string;
  provider: string;
  params: Json;
  max_attempts: number | null;
  state: JobState;
  version: number;
  attempts: number;
  completed_by: AttemptId | null;
  result: Json | null;
  created_at: Date;
  completed_at: Date | null;
  cancelled_at: Date | null;
}

/** A row of jobguard.attempts_of() / jobguard.attempt_overview. */
export interface Attempt {
  attempt_id: AttemptId;
  job_id: JobId;
  attempt_no: number;
  provider: string;
  state: AttemptState;
  read_version: number;
  attempt_key: string | null;
  started_at: Date;
  deadline: Date;
  finished_at: Date | null;
  error: string | null;
  lost_to: AttemptId | null;
  lost_result: Json | null;
  cancelled_at: Date | null;
  cancel_reason: string | null;
}

export function submit(db: Queryable, request: SubmitRequest): Promise<Submitted>;
export function beginAttempt(db: Queryable, jobId: JobId, options?: BeginOptions): Promise<AttemptId>;
export function finish(db: Queryable, attemptId: AttemptId, result: Json): Promise<Outcome>;
export function fail(db: Queryable, attemptId: AttemptId, error: string): Promise<'failed'>;
export function markUnknown(db: Queryable, attemptId: AttemptId): Promise<'unknown'>;
export function cancelAttempt(db: Queryable, attemptId: AttemptId, reason: string): Promise<'cancelled'>;
export function cancelJob(db: Queryable, jobId: JobId, reason: string): Promise<'cancelled'>;
export function jobState(db: Queryable, jobId: JobId): Promise<JobState>;
export function job(db: Queryable, jobId: JobId): Promise<Job>;
export function attempts(db: Queryable, jobId: JobId): Promise<Attempt[]>;
export function attempt(db: Queryable, attemptId: AttemptId): Promise<Attempt | undefined>;
/** Holds the connection while it waits: pass a Client or PoolClient of its own. */
export function awaitJob(db: Queryable, jobId: JobId, timeoutSeconds: number): Promise<JobState>;

// Version 1.1, NOT on the server yet (see the marked block in index.js):
//   claim, heartbeat, submitMany, fail(..., { retryInSeconds })

/** Base of every jobguard error; extends pg's DatabaseError. */
export class JobguardError extends DatabaseError {
  constructor(pgError: DatabaseError);
  /** the SQLSTATE, e.g. 'JG001' */
  static readonly sqlstate: string;
  /** the SPEC's condition name, e.g. 'idempotency_key_reused' */
  static readonly condition: string;
  cause: DatabaseError;
}
/** JG001: the owner's key was used for a different request. */
export class IdempotencyKeyReused extends JobguardError {
  jobId: JobId | null; idempotencyKey: string | null; ownerId: string | null; differsIn: string | null;
}
/** JG002: an open attempt blocks a new one. */
export class AttemptInFlight extends JobguardError {
  jobId: JobId | null; blockingAttemptId: AttemptId | null; blockingAttemptNo: number | null;
  blockingProvider: string | null; blockingState: AttemptState | null; deadline: string | null;
}
/** JG003: the job succeeded (completedBy) or was cancelled. */
export class JobClosed extends JobguardError {
  jobId: JobId | null; completedBy: AttemptId | null; cancelled: boolean | null;
}
/** JG004: a fallback provider is not certified for the job's operation. */
export class ProviderNotCertified extends JobguardError {
  provider: string | null; operation: string | null; jobId: JobId | null;
}
/** JG005: the job has used all of its attempts. */
export class AttemptsExhausted extends JobguardError { jobId: JobId | null; maxAttempts: number | null; }
/** JG006: a transition the attempt's state does not allow. */
export class InvalidTransition extends JobguardError {
  attemptId: AttemptId | null; jobId: JobId | null; state: AttemptState | null;
}
/** JG007: the attempt already reported a different result. */
export class ResultMismatch extends JobguardError { attemptId: AttemptId | null; jobId: JobId | null; }
/** JG008: no job with that id. */
export class JobNotFound extends JobguardError { jobId: JobId | null; }
/** JG009: no attempt with that id. */
export class AttemptNotFound extends JobguardError { attemptId: AttemptId | null; }
/** 22004: a required argument is NULL. */
export class NullValueNotAllowed extends JobguardError {}
/** 22023: an empty, too long or out-of-range argument. */
export class InvalidParameterValue extends JobguardError {}

export const BY_SQLSTATE: Record<string, typeof JobguardError>;
/** The jobguard class for a pg error with a jobguard SQLSTATE; anything else unchanged. */
export function translate(err: unknown): unknown;
