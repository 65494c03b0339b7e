// Types of the jobguard Node.js client (index.js, errors.js), written by hand.

import { DatabaseError, Pool, PoolConfig } from 'pg';

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
  /** the scope the job belongs to */
  scope: string;
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
  /** the worker named in the claim that began it (null for begin_attempt) */
  worker: string | null;
}

/** A job that claim handed out, with the attempt begun on it (a row of jobguard.claim()). */
export interface Claimed {
  attempt_id: AttemptId;
  job_id: JobId;
  attempt_no: number;
  operation: string;
  provider: string;
  params: Json;
  deadline: Date;
  /** the attempt's provider key (1.2): pass this to your provider as its idempotency key;
   * undefined on a 1.1 database */
  provider_key?: string;
  /** true when claim redrove a stalled attempt: the same request again, under the same
   * provider_key (1.2; undefined on a 1.1 database) */
  redrive?: boolean;
  /** true when provider is a fallback of the operation's failover route, not the job's own
   * provider: run the attempt against provider (1.3; undefined in a 1.2 database's claim rows) */
  failover?: boolean;
}

/** An unknown attempt that claimUnknown leased to a reconciler (a row of jobguard.claim_unknown()). */
export interface Unknown {
  attempt_id: AttemptId;
  job_id: JobId;
  operation: string;
  provider: string;
  /** look the attempt up at the provider by this key */
  provider_key: string;
  params: Json;
  unknown_since: Date;
  redrivable: boolean;
}

export interface ClaimUnknownOptions {
  /** the reconciler's name; 1 to 255 characters */
  worker: string;
  /** only attempts of these operations; null or absent: any */
  operations?: readonly string[] | null;
  /** at most this many attempts; default 1 */
  maxRows?: number;
  /** only attempts unknown for at least this long; default 0 */
  olderThanSeconds?: number;
  /** no other reconciler gets them for this long; default 30 */
  leaseSeconds?: number;
}

/** An element finish_many decided: what finish would have resolved to. */
export interface FinishDecided {
  ord: number;
  attempt_id: AttemptId;
  outcome: Outcome;
  sqlstate: null;
  message: null;
}
/** An element finish_many refused (JG006, JG007, JG009, 22004, 54000): nothing was written for it. */
export interface FinishRefused {
  ord: number;
  attempt_id: AttemptId | null;
  outcome: null;
  /** BY_SQLSTATE names the class finish would have thrown */
  sqlstate: string;
  message: string;
}
/** One row of finishMany's answer, per element in order (ord from 1). */
export type FinishOutcome = FinishDecided | FinishRefused;

export interface ClaimOptions {
  /** recorded on each attempt (attempt_overview.worker); 1 to 255 characters */
  worker: string;
  /** only jobs of these operations; null or absent: any */
  operations?: readonly string[] | null;
  /** each attempt's deadline, in seconds from the claim; default 30 */
  timeoutSeconds?: number;
  /** at most this many jobs (1 to 1000); default 1 */
  maxJobs?: number;
  /** null: the provider each job's route chooses; given: only attempts against it */
  provider?: string | null;
  /** when nothing is runnable, wait up to this long for work; default 0 */
  waitSeconds?: number;
  /** only attempts whose chosen provider is one of these; null or absent: any (1.3: a 1.2
   * database's claim has no such argument) */
  providers?: readonly string[] | null;
}

export interface FailOptions {
  /** claim hands the job out again no sooner than this; absent: the operation's backoff */
  retryInSeconds?: number | null;
}

/** A request that submit_many accepted: created now, or a replay of the existing job. */
export interface SubmitAccepted {
  ord: number;
  job_id: JobId;
  created: boolean;
  sqlstate: null;
  message: null;
}
/** A request that submit_many refused: nothing was written for it. */
export interface SubmitRefused {
  ord: number;
  /** the existing job for JG001, else null */
  job_id: JobId | null;
  created: false;
  /** 'JG001', '22004' or '22023': BY_SQLSTATE names the class submit would have thrown */
  sqlstate: string;
  message: string;
}
/** One row of submitMany's answer, per request in order (ord from 1). */
export type SubmitOutcome = SubmitAccepted | SubmitRefused;

export function submit(db: Queryable, request: SubmitRequest): Promise<Submitted>;
export function beginAttempt(db: Queryable, jobId: JobId, options?: BeginOptions): Promise<AttemptId>;
export function finish(db: Queryable, attemptId: AttemptId, result: Json): Promise<Outcome>;
export function fail(db: Queryable, attemptId: AttemptId, error: string,
  options?: FailOptions): Promise<'failed'>;
export function markUnknown(db: Queryable, attemptId: AttemptId): Promise<'unknown'>;
export function cancelAttempt(db: Queryable, attemptId: AttemptId, reason: string): Promise<'cancelled'>;
export function cancelJob(db: Queryable, jobId: JobId, reason: string): Promise<'cancelled'>;
export function jobState(db: Queryable, jobId: JobId): Promise<JobState>;
export function job(db: Queryable, jobId: JobId): Promise<Job>;
export function attempts(db: Queryable, jobId: JobId): Promise<Attempt[]>;
export function attempt(db: Queryable, attemptId: AttemptId): Promise<Attempt | undefined>;
/** Holds the connection while it waits: pass a Client or PoolClient of its own. */
export function awaitJob(db: Queryable, jobId: JobId, timeoutSeconds: number): Promise<JobState>;

/** Begin attempts on up to maxJobs runnable jobs, oldest first; [] when none is runnable. */
export function claim(db: Queryable, options: ClaimOptions): Promise<Claimed[]>;
/** Push back a started attempt's deadline; InvalidTransition once it is past it. */
export function heartbeat(db: Queryable, attemptId: AttemptId,
  extendBySeconds?: number | null): Promise<Date>;
/** Submit many requests in one statement; a refused one is a row, not an error. */
export function submitMany(db: Queryable, requests: readonly SubmitRequest[]): Promise<SubmitOutcome[]>;
/** Lease unknown attempts to look up at their provider (1.2); [] when there are none. */
export function claimUnknown(db: Queryable, options: ClaimUnknownOptions): Promise<Unknown[]>;
/** Report many results in one statement (1.2); a refused one is a row, not an error. */
export function finishMany(db: Queryable, attemptIds: readonly AttemptId[],
  results: readonly Json[]): Promise<FinishOutcome[]>;
/** The attempt's provider key (1.2). */
export function providerKey(db: Queryable, attemptId: AttemptId): Promise<string>;
/** Whether the database's claim takes a providers list (1.3). */
export function claimTakesProviders(db: Queryable): Promise<boolean>;
/** Prepare the statements of every call from now on (default false: unnamed
 * statements, which work behind a transaction-mode pooler).  Only where every
 * connection is a session of its own (direct, or a session-mode pooler). */
export function setPrepareStatements(on: boolean): void;

/** What a Worker calls for each claimed job; what it resolves to is the result.
 * Pass job.provider_key to your provider as its idempotency key. */
export type Handler = (job: Claimed) => Json | Promise<Json>;

/** A handler per provider: each attempt runs the handler of its row's provider, and a
 * Worker never claims a row for a provider it has no handler for. */
export interface Handlers {
  handlers: Record<string, Handler>;
}

/** What a Reconciler calls for each unknown attempt: the provider's result, or
 * undefined / null when the provider does not know yet (the attempt stays unknown). */
export type Reconcile = (attempt: Unknown) => Json | undefined | Promise<Json | undefined>;

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export interface WorkerOptions {
  /** pg pool options for the worker's own pool (max 2); the PG* environment fills in the rest */
  connection?: PoolConfig;
  /** a pool of your own instead (its error handling is yours) */
  pool?: Pool;
  /** recorded on each attempt; give a stable one so that a restarted worker marks its earlier open attempts unknown */
  name?: string;
  operations?: readonly string[] | null;
  /** only attempts against this provider (with handlers: one of theirs) */
  provider?: string | null;
  /** one handler: the providers it serves (no row for another is claimed); default any */
  providers?: readonly string[] | null;
  /** max_jobs per claim; default 1 */
  batch?: number;
  /** each attempt's deadline from the claim, and from each heartbeat; default 30 */
  timeoutSeconds?: number;
  /** how long a claim waits for work; default 2 (at most a third of the timeout per claim) */
  waitSeconds?: number;
  /** default a third of timeoutSeconds */
  heartbeatSeconds?: number;
  /** the first wait before reconnecting; doubles up to reconnectMaxSeconds (default 0.1 and 5) */
  reconnectMinSeconds?: number;
  reconnectMaxSeconds?: number;
  /** once stopped, how long a report is still tried; default 30 */
  shutdownGraceSeconds?: number;
  /** default console */
  logger?: Logger;
}

export interface RunOptions {
  /** resolve once claims have found nothing for waitSeconds */
  untilIdle?: boolean;
  /** SIGTERM and SIGINT call stop(); default true */
  handleSignals?: boolean;
}

export interface WorkerStats {
  claimed: number;
  /** attempts a cut-off claim of this worker began, found and run */
  adopted: number;
  /** open attempts of its name from before it started, marked unknown, not run */
  markedUnknown: number;
  won: number;
  lost: number;
  rejected: number;
  /** attempts failed because the provider refused (ProviderRefused, RetryLater, a numeric retryInSeconds) */
  failed: number;
  /** attempts marked unknown because the handler threw InProgress */
  inProgress: number;
  /** attempts marked unknown because the handler threw an error that is not a refusal */
  handlerErrors: number;
  /** attempts marked unknown because the handler's result cannot be sent (undefined, null, not JSON, too large) */
  unrecorded: number;
  released: number;
  /** rows for a provider the worker has no handler for, handed back unrun (a claim never gives them) */
  unhandled: number;
  /** claims (or look-ups of its own open attempts) that met a server error: logged, tried again with backoff */
  claimErrors: number;
  /** reports tried again after a server error that was not a refusal (a timeout, a serialization failure, ...) */
  reportRetries: number;
  /** reports that could not be recorded (the attempt left open) or were refused as never recordable */
  reportErrors: number;
  heartbeats: number;
  heartbeatsRefused: number;
  reconnects: number;
}

/** Claims jobs, runs the handler on each, reports; heartbeats, reconnects, stops cleanly. */
export class Worker {
  constructor(handler: Handler | Handlers, options?: WorkerOptions);
  readonly name: string;
  readonly stats: WorkerStats;
  readonly stopping: boolean;
  /** Claim and handle jobs until stop(); resolves to the stats. */
  run(options?: RunOptions): Promise<WorkerStats>;
  /** Let the current job finish and report, claim nothing more. */
  stop(): void;
}

/** Thrown by a handler or a reconcile function: the provider said no.  The attempt
 * fails (the next one gets a new provider key), retried no sooner than retryInSeconds.
 * Only this (or an error with a numeric retryInSeconds) fails an attempt: any other
 * error a handler throws marks it unknown. */
export class ProviderRefused extends Error {
  constructor(message: string, retryInSeconds?: number);
  retryInSeconds: number | undefined;
}

/** Thrown by a handler: fail the attempt, retry the job no sooner than retryInSeconds. */
export class RetryLater extends ProviderRefused {
  constructor(message: string, retryInSeconds: number);
  retryInSeconds: number;
}

/** Thrown by a handler: the provider says this provider key is still being processed.
 * The Worker marks the attempt unknown (mark_unknown), never failed. */
export class InProgress extends Error {
  constructor(message?: string);
}

export interface ReconcilerOptions {
  /** pg pool options for the reconciler's own pool (max 1); the PG* environment fills in the rest */
  connection?: PoolConfig;
  /** a pool of your own instead (its error handling is yours) */
  pool?: Pool;
  /** the reconciler's name (claim_unknown's worker) */
  name?: string;
  operations?: readonly string[] | null;
  /** max_rows per claim_unknown; default 10 */
  batch?: number;
  /** only attempts unknown for at least this long; default 0 */
  olderThanSeconds?: number;
  /** how long claim_unknown keeps the rows from other reconcilers; default 30 */
  leaseSeconds?: number;
  /** the pause after a round that found nothing; default 2 */
  waitSeconds?: number;
  reconnectMinSeconds?: number;
  reconnectMaxSeconds?: number;
  /** once stopped, how long a report is still tried; default 30 */
  shutdownGraceSeconds?: number;
  logger?: Logger;
}

export interface ReconcilerStats {
  /** unknown attempts leased by claim_unknown */
  claimed: number;
  won: number;
  lost: number;
  rejected: number;
  /** failed: the provider said no (ProviderRefused) */
  failed: number;
  /** left unknown: undefined / null returned, or InProgress thrown */
  left: number;
  /** left unknown: reconcile threw, or its result cannot be recorded */
  errors: number;
  /** claim_unknown rounds that met a server error: logged, tried again with backoff */
  claimErrors: number;
  /** reports tried again after a server error that was not a refusal */
  reportRetries: number;
  /** reports that could not be recorded (the attempt left unknown) */
  reportErrors: number;
  reconnects: number;
}

/** Leases unknown attempts (claim_unknown), asks reconcile about each once, reports:
 * a result finishes (finish_many per batch), ProviderRefused fails, nothing leaves it unknown. */
export class Reconciler {
  constructor(reconcile: Reconcile, options?: ReconcilerOptions);
  readonly name: string;
  readonly stats: ReconcilerStats;
  readonly stopping: boolean;
  /** Lease and reconcile until stop() (untilIdle: until a round finds nothing). */
  run(options?: RunOptions): Promise<ReconcilerStats>;
  /** Let the current call finish, report the batch so far, lease nothing more. */
  stop(): void;
}

/** Base of every jobguard error; extends pg's DatabaseError. */
export class JobguardError extends DatabaseError {
  constructor(pgError: DatabaseError);
  /** the SQLSTATE, e.g. 'JG001' */
  static readonly sqlstate: string;
  /** the SPEC's condition name, e.g. 'idempotency_key_reused' */
  static readonly condition: string;
  cause: DatabaseError;
  /** 'message' and/or 'detail': the texts no template of src/errors.table matched */
  unparsed: Array<'message' | 'detail'>;
}
// BEGIN generated by scripts/gen-errors from src/errors.table: edit that file, not this part
/** JG001: the owner's key was used for a different request. jobId is the existing job; differsIn names what differs. */
export class IdempotencyKeyReused extends JobguardError {
  jobId: JobId | null; idempotencyKey: string | null; ownerId: string | null; differsIn: string |
  null;
}
/** JG002: an open attempt (started or unknown) blocks a new one. blockingAttemptId and blockingState name it. */
export class AttemptInFlight extends JobguardError {
  jobId: JobId | null; blockingAttemptId: AttemptId | null; blockingAttemptNo: number | null;
  blockingProvider: string | null; blockingState: AttemptState | null; deadline: string | null;
}
/** JG003: the job succeeded (completed_by holds the winning attempt) or was cancelled (cancelled is true). */
export class JobClosed extends JobguardError {
  jobId: JobId | null; completedBy: AttemptId | null; cancelled: boolean | null;
}
/** JG004: a fallback provider is not certified for the job's operation. */
export class ProviderNotCertified extends JobguardError {
  provider: string | null; operation: string | null; jobId: JobId | null;
}
/** JG005: the job has used all of its max_attempts. */
export class AttemptsExhausted extends JobguardError {
  jobId: JobId | null; maxAttempts: number | null;
}
/** JG006: the attempt's state does not allow the transition. */
export class InvalidTransition extends JobguardError {
  attemptId: AttemptId | null; jobId: JobId | null; state: AttemptState | null;
}
/** JG007: the attempt already reported a different result. */
export class ResultMismatch extends JobguardError {
  attemptId: AttemptId | null; jobId: JobId | null;
}
/** JG008: no job with that id. attemptId is set when the number given is an attempt's id (the DETAIL "N is the id of an attempt, not of a job."): an attempt id was passed where a job id belongs. */
export class JobNotFound extends JobguardError {
  jobId: JobId | null; attemptId: AttemptId | null;
}
/** JG009: no attempt with that id. jobId is set when the number given is a job's id (the DETAIL "N is the id of a job, not of an attempt."): a job id was passed where an attempt id belongs. */
export class AttemptNotFound extends JobguardError {
  attemptId: AttemptId | null; jobId: JobId | null;
}
/** JG010: the provider is at its max_in_flight or max_per_second. limit names the limit (maxInFlight or maxPerSecond); max and open are set for maxInFlight; for maxPerSecond the HINT says in how many ms to retry. */
export class ProviderBusy extends JobguardError {
  provider: string | null; limit: string | null; open: number | null; max: number | null;
}
/** 22004: a required argument is NULL. */
export class NullValueNotAllowed extends JobguardError {}
/** 22023: an empty, too long or out-of-range argument. */
export class InvalidParameterValue extends JobguardError {}
// END generated

export const BY_SQLSTATE: Record<string, typeof JobguardError>;
/** The jobguard class for a pg error with a jobguard SQLSTATE; anything else unchanged. */
export function translate(err: unknown): unknown;

/** What a certification run gives the handler: a Worker's job, against the candidate
 * provider, under a provider key of this run (point the handler at the provider's test
 * mode); job_id is null for an input of a file that names no job. */
export interface CertificationJob {
  attempt_id: null;
  job_id: JobId | null;
  attempt_no: null;
  operation: string;
  provider: string;
  params: Json;
  deadline: null;
  provider_key: string;
  redrive: false;
  failover: boolean;
  certification: true;
}

/** compare: true when the output matches the winning result; false, a message or
 * { path, message } when it does not. */
export type Compare = (output: Json, winning: Json, job: CertificationJob) =>
  boolean | string | { path?: string; message: string } | Promise<boolean | string | { path?: string; message: string }>;

export interface CertifyOptions {
  client?: Queryable;
  pool?: Pool;
  operation: string;
  /** the candidate provider */
  provider: string;
  handler: (job: CertificationJob) => Json | Promise<Json>;
  /** the params of this many of the operation's most recent succeeded jobs; default 50 */
  sample?: number;
  /** a file of inputs instead: one JSON object a line, {"params", "job_id"?, "result"?} */
  inputs?: string;
  compare?: Compare;
}

/** One input that did not pass. */
export interface CertificationFailure {
  jobId: JobId | null;
  /** "job <id>", or "<file>:<line>" for a file's input without a job */
  where: string;
  /** the JSON path of the violation, '$' for the whole output */
  path: string;
  message: string;
}

/** The evidence certify_provider records (the SPEC's fixed shape). */
export interface CertificationEvidence {
  runner: string;
  contract_version: number | null;
  inputs: number;
  passed: number;
  failed: 0;
  sample: 'recent' | 'file';
  job_ids: JobId[];
  started_at: string;
  ended_at: string;
}

export interface CertificationReport {
  certified: boolean;
  operation: string;
  provider: string;
  contractVersion: number | null;
  sample: 'recent' | 'file';
  inputs: number;
  passed: number;
  failed: number;
  failures: CertificationFailure[];
  jobIds: JobId[];
  /** set when certified */
  evidence?: CertificationEvidence;
}

/** The certification runner (1.3): the handler on real inputs, each output checked with
 * check_result (and compare); certify_provider only when every input passed. */
export function certify(options: CertifyOptions): Promise<CertificationReport>;
/** One failure as the command line prints it: "job 12: $.amount: expected integer, got string". */
export function formatFailure(failure: CertificationFailure): string;
/** The caller may not read the params of the operation's jobs. */
export class PayloadRightsRequired extends Error {}
/** The run could not take place (no inputs, a bad inputs file, the contract changed, no
 * right to certify); nothing was certified. */
export class CertifyError extends Error {}
