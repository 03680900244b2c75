// Fake calls for the unit tests: a Session or server-streaming call that
// yields given events, then ends with a given status, recording what the
// code under test sends.

import { Metadata } from "@grpc/grpc-js";
import { CompletionEvent, SessionRequest } from "../src/index";

/** Ending is how a fake call ends: OK, or a status with its details trailer. */
export interface Ending {
  code: number;
  message?: string;
  detailsBin?: string; // base64 google.rpc.Status
}

/** serviceError is the error grpc-js would raise for ending. */
export function serviceError(end: Ending): Error & { code: number; details: string; metadata: Metadata } {
  const md = new Metadata();
  if (end.detailsBin) md.set("grpc-status-details-bin", Buffer.from(end.detailsBin, "base64"));
  return Object.assign(new Error(`${end.code} ${end.message ?? ""}`), {
    code: end.code,
    details: end.message ?? "",
    metadata: md,
  });
}

/** Sent is one request the code under test sent, with the seq of the last event it had received. */
export interface Sent {
  afterSeq: number;
  request: SessionRequest;
}

/** FakeSession plays events and records writes; it implements SessionCall. */
export class FakeSession implements AsyncIterable<CompletionEvent> {
  readonly sent: Sent[] = [];
  ended = false;
  cancelled = false;
  #lastSeq = 0;

  constructor(
    private readonly evs: CompletionEvent[],
    private readonly ending: Ending = { code: 0 },
  ) {}

  write(request: SessionRequest): boolean {
    // Round-trip through the wire, as grpc-js would send it.
    this.sent.push({ afterSeq: this.#lastSeq, request: SessionRequest.decode(SessionRequest.encode(request).finish()) });
    return true;
  }

  end(): void {
    this.ended = true;
  }

  cancel(): void {
    this.cancelled = true;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<CompletionEvent> {
    for (const ev of this.evs) {
      this.#lastSeq = ev.seq;
      yield ev;
    }
    if (this.ending.code !== 0) throw serviceError(this.ending);
  }
}

/** Leg is one call of a FakeSource: its events, then how it ends. */
export interface Leg {
  events: CompletionEvent[];
  end: Ending;
}

/** FakeSource serves a CompletionStream from legs: the first for open, the next ones for each attach. */
export class FakeSource {
  readonly attaches: { completionId: string; afterSeq: number }[] = [];
  cancels = 0;
  #legs: Leg[];

  constructor(legs: Leg[]) {
    this.#legs = [...legs];
  }

  open() {
    return this.#call();
  }

  attach(completionId: string, afterSeq: number) {
    this.attaches.push({ completionId, afterSeq });
    return this.#call();
  }

  #call() {
    const leg = this.#legs.shift();
    if (leg === undefined) throw new Error("no leg left for this call");
    return {
      cancel: () => {
        this.cancels++;
      },
      async *[Symbol.asyncIterator]() {
        for (const ev of leg.events) yield ev;
        if (leg.end.code !== 0) throw serviceError(leg.end);
      },
    };
  }
}

/** FakeSessions serves a Session loop from legs: one FakeSession per call, the first for start, the next ones for each resume. */
export class FakeSessions {
  readonly calls: FakeSession[] = [];
  #legs: Leg[];

  constructor(legs: Leg[]) {
    this.#legs = [...legs];
  }

  open(): FakeSession {
    const leg = this.#legs.shift();
    if (leg === undefined) throw new Error("no leg left for this call");
    const call = new FakeSession(leg.events, leg.end);
    this.calls.push(call);
    return call;
  }
}
