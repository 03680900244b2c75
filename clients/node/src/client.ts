// The Client: connects to completiond and wraps the generated grpc-js stub
// with what every caller would otherwise write again — typed errors, a Fold
// kept up to date, reconnection of resumable streams, the Session tool loop.

import {
  type CallOptions as GrpcCallOptions,
  type ChannelInterface,
  type ChannelCredentials,
  type ChannelOptions,
  credentials as grpcCredentials,
  Metadata,
} from "@grpc/grpc-js";
import {
  AttachRequest,
  CancelRequest,
  type CancelResponse,
  CompleteRequest,
  CompleteResponse,
  CompletionClient,
  type DeepPartial,
  ListRoutesRequest,
  type RouteInfo,
  SessionStart,
} from "./gen/completion/v1/completion";
import { errorFromGrpc } from "./errors";
import { onAbort } from "./abort";
import { Fold } from "./fold";
import { runSessionOver, type SessionHandlers } from "./session";
import { CompletionStream, DEFAULT_RECONNECT, type ReconnectPolicy } from "./stream";
import { newIdempotencyKey } from "./reconnect";

/** DEFAULT_ADDRESS is where `make run` serves. */
export const DEFAULT_ADDRESS = "localhost:50051";

/** TLS settings for a connection: PEM buffers; all optional (the system's roots by default). */
export interface TlsOptions {
  /** rootCerts are the CAs to trust instead of the system's. */
  rootCerts?: Buffer;
  /** privateKey and certChain are the client's certificate, for mTLS. */
  privateKey?: Buffer;
  /** certChain is the client's certificate chain, for mTLS. */
  certChain?: Buffer;
}

/** ClientOptions say how a Client reaches the server. */
export interface ClientOptions {
  /** tls secures the connection (true: the system's roots); absent or false connects in plain text. */
  tls?: boolean | TlsOptions;
  /** credentials, when set, are used as they are instead of tls. */
  credentials?: ChannelCredentials;
  /** apiKey, when set, is sent as "authorization: Bearer <key>" on every call. */
  apiKey?: string;
  /** channel wraps an existing grpc-js channel instead of opening one. */
  channel?: ChannelInterface;
  /** channelOptions are grpc-js channel options (keepalive, message sizes …). */
  channelOptions?: ChannelOptions;
  /**
   * connections is how many channels to open to the target, each on its own
   * HTTP/2 connection; each call starts on the next. 1 (the default) carries
   * thousands of streams on the server's defaults. More spread the streams
   * when the server's --max-streams-per-conn is below what this client runs
   * at once (past it a connection's streams wait in the client, silently),
   * or over replicas behind a TCP load balancer. Ignored with channel.
   */
  connections?: number;
  /** reconnect says how a resumable stream attaches again, or a Session resumes, after a drop (DEFAULT_RECONNECT). */
  reconnect?: Partial<ReconnectPolicy>;
}

/** CallOptions apply to one call. */
export interface CallOptions {
  /** deadline of the call (each reconnection of a stream keeps the same deadline). */
  deadline?: Date | number;
  /** signal cancels the call when aborted (a Session sends Cancel first). */
  signal?: AbortSignal;
  /** metadata is sent with the call, besides the API key. */
  metadata?: Metadata | Record<string, string>;
}

/** CompleteRequestInit is a CompleteRequest in which every field may be left out. */
export type CompleteRequestInit = DeepPartial<CompleteRequest>;

/** SessionStartInit is a SessionStart in which every field may be left out. */
export type SessionStartInit = DeepPartial<SessionStart>;

/**
 * Client calls completiond. One Client holds one channel (HTTP/2
 * connection), or options.connections of them, and may run any number of
 * calls at once.
 */
export class Client {
  readonly #stubs: CompletionClient[];
  #turn = 0;
  readonly #apiKey: string | undefined;
  readonly #reconnect: ReconnectPolicy;

  /**
   * Connects to target, a host:port (default COMPLETIOND_ADDR, else
   * localhost:50051; grpc-js connects lazily, on the first call), or wraps
   * target when it is a generated CompletionClient (and its channel).
   */
  constructor(target: string | CompletionClient = defaultAddress(), options: ClientOptions = {}) {
    this.#stubs = typeof target === "string" ? newStubs(target, options) : [target];
    this.#apiKey = options.apiKey;
    this.#reconnect = { ...DEFAULT_RECONNECT, ...options.reconnect };
  }

  /** stub is the generated grpc-js client, for anything this class does not wrap: over the next channel at each use. */
  get stub(): CompletionClient {
    const stub = this.#stubs[this.#turn % this.#stubs.length]!;
    this.#turn = (this.#turn + 1) % this.#stubs.length;
    return stub;
  }

  /**
   * stream starts a completion and returns its events as an async iterable
   * that keeps stream.fold up to date and throws a CompletiondError at the
   * end when the status is not OK. With request.resumeGrace set, a dropped
   * connection after the started event is healed with Attach: the caller
   * sees every seq exactly once.
   */
  stream(request: CompleteRequestInit, options: CallOptions = {}): CompletionStream {
    const req = withIdempotencyKey(request);
    const graceMs = durationMs(req.resumeGrace);
    return new CompletionStream({
      open: () => quiet(this.stub.stream(req, this.#metadata(options), this.#grpcOptions(options))),
      attach: (id, afterSeq) => this.#attachCall(id, afterSeq, options),
      graceMs,
      resumable: graceMs > 0,
      policy: this.#reconnect,
      signal: options.signal,
      restart: true,
    });
  }

  /**
   * attach follows a running or recently ended completion after its event
   * afterSeq (0: from the start) to its result, as a CompletionStream whose
   * fold starts there. It attaches again by itself if the connection drops.
   * Attach ends with the status the completion's own stream ended with, so
   * a completion that did not end COMPLETED throws its real error.
   */
  attach(completionId: string, afterSeq = 0, options: CallOptions = {}): CompletionStream {
    return new CompletionStream({
      open: () => this.#attachCall(completionId, afterSeq, options),
      attach: (id, seq) => this.#attachCall(id, seq, options),
      graceMs: 0,
      resumable: true,
      policy: this.#reconnect,
      signal: options.signal,
      fold: new Fold({ completionId, afterSeq }),
      attached: true,
    });
  }

  /** complete runs one completion and resolves to its aggregated answer, or rejects with a CompletiondError. */
  complete(request: CompleteRequestInit, options: CallOptions = {}): Promise<CompleteResponse> {
    const req = withIdempotencyKey(request);
    return new Promise((resolve, reject) => {
      const call = this.stub.complete(req, this.#metadata(options), this.#grpcOptions(options), (err, resp) =>
        err ? reject(errorFromGrpc(err)) : resolve(resp),
      );
      onAbort(options.signal, () => call.cancel());
    });
  }

  /**
   * cancel ends the running completion completionId as its caller's own
   * cancel would (ABORTED_STREAMING, or ABORTED_TOOLS while a Session awaits
   * its caller), from any connection — in a fleet, through any replica — and
   * resolves once the end is in the server's log, to how it ended (reason,
   * code, resultSeq; alreadyEnded for a completion that had ended). It
   * rejects with a CompletiondError: NOT_FOUND (COMPLETION_NOT_FOUND) for an
   * unknown id and another key's completion alike, UNAVAILABLE
   * (CANCEL_PENDING) when the end did not come within the server's wait —
   * the cancel stands, and cancel again waits again.
   */
  cancel(completionId: string, options: CallOptions = {}): Promise<CancelResponse> {
    const req = CancelRequest.fromPartial({ completionId });
    return new Promise((resolve, reject) => {
      const call = this.stub.cancel(req, this.#metadata(options), this.#grpcOptions(options), (err, resp) =>
        err ? reject(errorFromGrpc(err, { completionId })) : resolve(resp),
      );
      onAbort(options.signal, () => call.cancel());
    });
  }

  /**
   * listRoutes resolves to the routes this client's key may use (every route
   * when the server runs without authentication), sorted by name: each with
   * its model, limits, fallbacks, capabilities (what the server's request
   * validation checks against), whether it is the default route and whether
   * its circuit is open now. It rejects with a CompletiondError.
   */
  listRoutes(options: CallOptions = {}): Promise<RouteInfo[]> {
    return new Promise((resolve, reject) => {
      const call = this.stub.listRoutes(
        ListRoutesRequest.fromPartial({}),
        this.#metadata(options),
        this.#grpcOptions(options),
        (err, resp) => (err ? reject(errorFromGrpc(err)) : resolve(resp.routes)),
      );
      onAbort(options.signal, () => call.cancel());
    });
  }

  /**
   * runSession runs a Session: it sends start, answers each tool_call event
   * with handlers.onToolCall's result as it arrives, each stop_hook_request
   * with handlers.onStopHook's verdict (VERDICT_ALLOW without one), and
   * resolves to the Fold at the end, or rejects with a CompletiondError.
   * Aborting options.signal sends Cancel and lets the server end the session.
   * With start.request.resumeGrace set, a dropped connection is healed: the
   * loop resumes the Session after its last seq and sends again the answers
   * the server may not have had; the handlers see every event once.
   */
  runSession(start: SessionStartInit, handlers: SessionHandlers, options: CallOptions = {}): Promise<Fold> {
    const open = () => quiet(this.stub.session(this.#metadata(options), this.#grpcOptions(options)));
    const keyed = SessionStart.fromPartial(start);
    keyed.request = withIdempotencyKey(keyed.request ?? {});
    return runSessionOver(open(), keyed, handlers, options.signal, {
      open,
      policy: this.#reconnect,
    });
  }

  /** close closes the channels; calls in flight fail. */
  close(): void {
    for (const stub of this.#stubs) stub.close();
  }

  #attachCall(completionId: string, afterSeq: number, options: CallOptions) {
    const req = AttachRequest.fromPartial({ completionId, afterSeq });
    return quiet(this.stub.attach(req, this.#metadata(options), this.#grpcOptions(options)));
  }

  #metadata(options: CallOptions): Metadata {
    const md = new Metadata();
    if (options.metadata instanceof Metadata) md.merge(options.metadata);
    else for (const [k, v] of Object.entries(options.metadata ?? {})) md.set(k, v);
    if (this.#apiKey !== undefined && this.#apiKey !== "") md.set("authorization", `Bearer ${this.#apiKey}`);
    return md;
  }

  #grpcOptions(options: CallOptions): Partial<GrpcCallOptions> {
    return options.deadline === undefined ? {} : { deadline: options.deadline };
  }
}

/** defaultAddress is COMPLETIOND_ADDR when set, else DEFAULT_ADDRESS. */
export function defaultAddress(): string {
  return process.env.COMPLETIOND_ADDR || DEFAULT_ADDRESS;
}

function newStubs(address: string, options: ClientOptions): CompletionClient[] {
  const creds = options.credentials ?? channelCredentials(options.tls);
  if (options.channel !== undefined) {
    return [new CompletionClient(address, creds, { ...options.channelOptions, channelOverride: options.channel })];
  }
  const n = Math.max(1, Math.floor(options.connections ?? 1));
  // grpc-js shares one connection between the channels of a process that
  // have the same target and options; a channel with a local subchannel
  // pool has its own, which is the point of opening several.
  const spread = n > 1 ? { "grpc.use_local_subchannel_pool": 1 } : {};
  return Array.from({ length: n }, () => new CompletionClient(address, creds, { ...options.channelOptions, ...spread }));
}

function channelCredentials(tls: ClientOptions["tls"]): ChannelCredentials {
  if (tls === undefined || tls === false) return grpcCredentials.createInsecure();
  if (tls === true) return grpcCredentials.createSsl();
  return grpcCredentials.createSsl(tls.rootCerts ?? null, tls.privateKey ?? null, tls.certChain ?? null);
}

function durationMs(d: { seconds: number; nanos: number } | undefined): number {
  return d === undefined ? 0 : d.seconds * 1000 + d.nanos / 1e6;
}

/**
 * quiet gives a grpc-js call a no-op "error" listener. The error reaches the
 * caller through the async iterator; but once the iterator is gone (the
 * caller left the loop and the call was cancelled) grpc-js still emits the
 * CANCELLED error, which without a listener would be an uncaught exception.
 */
function quiet<T extends { on(event: "error", listener: (err: Error) => void): unknown }>(call: T): T {
  call.on("error", () => {});
  return call;
}

/**
 * withIdempotencyKey is the request with an idempotencyKey: its own, else a
 * random one (16 bytes, hex), so that a start sent again (after a drop
 * before started, or by the caller with the same request) is not a second
 * completion. fromPartial makes a new message: the caller's is not changed.
 */
export function withIdempotencyKey(request: CompleteRequestInit): CompleteRequest {
  const req = CompleteRequest.fromPartial(request);
  if (req.idempotencyKey === "") req.idempotencyKey = newIdempotencyKey();
  return req;
}
