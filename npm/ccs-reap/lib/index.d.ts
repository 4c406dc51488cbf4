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
}

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
/** `spawn <id> -- <cmd...>`: creates the session if it is gone, resuming its conversation. */
export declare function spawn(id: string, cmd: string[], opts?: SpawnOptions): Promise<SpawnResult>;
/** `status --json`, parsed (docs/commands.md has its fields). */
export declare function status(opts?: RunOptions): Promise<Record<string, unknown>>;
