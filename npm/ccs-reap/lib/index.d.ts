/// <reference types="node" />

/** Options of every call. */
export interface RunOptions {
  /** The environment of the run (default process.env): CCS_TMUX_SOCKET(_PATH), CCS_REAP_STATE_DIR, ... */
  env?: NodeJS.ProcessEnv;
  /** The working directory of the run. */
  cwd?: string;
  /** Kill the run after this long (ms); 0 or unset: never. */
  timeoutMs?: number;
  /** A ccs-reap binary to run instead of binaryPath. */
  binary?: string;
}

export interface SpawnOptions extends RunOptions {
  /** The conversation to resume when no tombstone names one (--cid). */
  cid?: string;
  /** The new session's working directory (--cwd). */
  sessionCwd?: string;
  /** The agent a launcher script runs ('claude', 'codex', 'gemini'): it gets the conversation (--agent). */
  agent?: string;
  /** Start a command that cannot be given the conversation as a new one, where spawn refuses (--new-conversation). */
  newConversation?: boolean;
  /** Do not make room first (--no-room); by default spawn makes room where CCS_ENGINE_MEM_HIGH or CCS_ENGINE_MAX_LIVE is set, and rejects with code 5 when there is none. */
  noRoom?: boolean;
}

export interface RoomOptions extends RunOptions {
  /** What the new chat needs: a size ('400M', '1G') or 'auto' (the default: the median footprint of the live chats). */
  need?: string;
  /** The new chat's id, when known (--for). */
  for?: string;
}
/** `room --json`'s document: `ok` false (exit 5) when no room can be made. */
export interface RoomResult {
  ok: boolean;
  exit: 0 | 5;
  error: string | null;
  need_bytes: number;
  need_auto: boolean;
  freed: { session: string; id: string; reason: 'room' | 'max-live' | string; bytes: number }[];
  freed_bytes: number;
  not_reaped: number;
  took_ms: number;
  plan: { fits: boolean; limit_bytes: number | null; used_bytes: number | null; live: number; max_live: number | null; left: Record<string, number>; [key: string]: unknown };
}
/** `room`: free memory for one new chat before it starts (least recently used idle chats first). */
export declare function room(opts?: RoomOptions): Promise<RoomResult>;

/** `spawn --json`'s document. */
export interface SpawnResult {
  ok: boolean;
  session: string;
  result: 'spawned' | 'exists' | string;
  exit: number;
  [key: string]: unknown;
}

/** A run that failed: its exit code (null when it did not exit: not found, killed) and output. */
export declare class CcsReapError extends Error {
  code: number | null;
  stderr: string;
  stdout: string;
  /** status(): the document printed with a non-zero exit. */
  status?: unknown;
}

/** The native binary: CCS_REAP_BINARY, else this platform's package's. Throws when there is none. */
export declare const binaryPath: string;
export declare function resolveBinary(): string;

/** Run the binary with args (no shell); resolves whatever the exit code. */
export declare function run(
  args: string[],
  opts?: RunOptions
): Promise<{ code: number; stdout: string; stderr: string }>;

/** `turn begin`: 'go' (exit 0), 'respawn' (exit 4: the session is gone; spawn it, then begin again). */
export declare function turnBegin(id: string, opts?: RunOptions): Promise<'go' | 'respawn'>;
/** `turn end`: 'ended' (exit 0), 'respawn' (exit 4: the session is gone). */
export declare function turnEnd(id: string, opts?: RunOptions): Promise<'ended' | 'respawn'>;
/**
 * `spawn <id> [-- <cmd...>]`: creates the session if it is gone, resuming its conversation. An
 * empty `cmd` (or none) replays the command line the chat's tombstone keeps.
 */
export declare function spawn(id: string, cmd?: string[], opts?: SpawnOptions): Promise<SpawnResult>;
/** `status --json`, parsed (docs/commands.md has its fields). */
export declare function status(opts?: RunOptions): Promise<Record<string, unknown>>;

/** `resume --json`: the chat brought back (spawned from its tombstone) or found live. */
export interface ResumeResult {
  ok: true;
  session: string;
  result: 'live' | 'spawned';
  /** Always false here (no terminal): run `attach` to attach. */
  attached: false;
  attach: string[];
  exit: number;
}
export declare function resume(id: string, opts?: RunOptions): Promise<ResumeResult>;

/** `forget --json`: the tombstone dropped. */
export interface ForgetResult {
  ok: true;
  session: string;
  result: 'forgotten';
  cid: string | null;
  [key: string]: unknown;
}
export declare function forget(id: string, opts?: RunOptions): Promise<ForgetResult>;

export interface ReapOptions extends RunOptions {
  /** --force: skip the checks of a chat's state (busy, viewed, no cid, ...). */
  force?: boolean;
  /** --dry-run: decide, change nothing. */
  dryRun?: boolean;
}
/** One audit line (docs/files.md): `outcome` 'reaped' | 'aborted' | 'failed' | ... */
export interface AuditLine {
  schema_version: number;
  session: string;
  outcome: string;
  reason: string;
  cid?: string | null;
  [key: string]: unknown;
}
/** `reap --json`: the reap's audit line; a refusal rejects (its document in `status`). */
export declare function reap(id: string, opts?: ReapOptions): Promise<AuditLine | { ok: true; dry_run: true; would_reap: true; message: string }>;

/** `pin` / `unpin`: 'gone' when the session is not there (exit 4). */
export declare function pin(id: string, opts?: RunOptions): Promise<'pinned' | 'gone'>;
export declare function unpin(id: string, opts?: RunOptions): Promise<'unpinned' | 'gone'>;

/** `doctor --json`, healthy or not (exit 0 or 1). */
export interface DoctorResult {
  ok: boolean;
  checks: { check: string; verdict: 'ok' | 'note' | 'problem'; message: string }[];
}
export declare function doctor(opts?: RunOptions): Promise<DoctorResult>;

/** `config --json`: every setting in effect and where it came from. */
export interface ConfigResult {
  ok: true;
  file: string | null;
  state_dir: string;
  tmux_socket: string;
  tmux_socket_chosen_by: string;
  rules: string;
  settings: { name: string; value: string | null; default: string | null; source: string; file: string | null; line: number | null }[];
  warnings: string[];
  [key: string]: unknown;
}
export declare function config(opts?: RunOptions): Promise<ConfigResult>;

export interface EventsOptions extends RunOptions {
  /** --from-start: first what the current audit log holds. */
  fromStart?: boolean;
}
/** `events`: every audit line as it is appended; `close()` stops it (SIGTERM). */
export interface Events extends AsyncIterable<AuditLine> {
  close(): Promise<{ code: number | null; signal?: string | null }>;
}
export declare function events(opts?: EventsOptions): Events;
