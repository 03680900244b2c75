// The Fold: a completion's events folded into its answer, event by event,
// exactly as the stream contract (README, "The stream contract") defines it.

import {
  CompletionEvent,
  DeltaKind,
  Result,
  StopReason,
  ToolCall,
  Transition,
  TransitionReason,
} from "./gen/completion/v1/completion";

/** Turn is the kept output of one conversation turn. */
export interface Turn {
  /** turn is the turn's number (1-based). */
  turn: number;
  /** text is the turn's kept text deltas, concatenated in arrival order. */
  text: string;
  /** thinking is the turn's kept reasoning deltas, concatenated likewise. */
  thinking: string;
  /** toolCalls are the turn's tool calls, in arrival order (never discarded). */
  toolCalls: ToolCall[];
}

/** A delta, kept until the end because a later transition may void its attempt. */
interface Piece {
  attempt: number;
  turn: number;
  kind: DeltaKind;
  text: string;
}

/**
 * Fold folds the events of one completion into its answer. A delta belongs
 * to its event's attempt and turn; a transition's discarded_attempts (and
 * discard_output, for the event's own attempt) voids every delta of those
 * attempts, already received or still to come; tool calls are final when they
 * arrive; an event whose seq is at or below the last one folded is ignored,
 * so a stream that attached again may repeat events harmlessly.
 *
 * seq is a uint64 on the wire; ts-proto (forceLong=number, its default)
 * decodes it as a JavaScript number, exact up to Number.MAX_SAFE_INTEGER
 * (2^53 − 1 events; the decoder throws beyond, it never rounds).
 */
export class Fold {
  #completionId = "";
  #lastSeq = 0;
  #turn = 0;
  #reason: TransitionReason | undefined;
  readonly #transitions: Transition[] = [];
  readonly #discarded = new Set<number>();
  readonly #pieces: Piece[] = [];
  readonly #calls: { turn: number; call: ToolCall }[] = [];
  #result: Result | undefined;

  /**
   * A new Fold is empty; from (an Attach after afterSeq) makes it continue a
   * completion whose earlier events it will not see.
   */
  constructor(from: { completionId?: string; afterSeq?: number } = {}) {
    this.#completionId = from.completionId ?? "";
    this.#lastSeq = from.afterSeq ?? 0;
  }

  /**
   * add folds ev in. It returns false, and changes nothing, for an event
   * whose seq is not above the last one folded (a repeat after a reconnect).
   */
  add(ev: CompletionEvent): boolean {
    const seq = Number(ev.seq);
    if (seq !== 0 && seq <= this.#lastSeq) {
      return false;
    }
    this.#lastSeq = seq;
    this.#turn = Math.max(this.#turn, ev.turn);
    if (ev.started !== undefined) {
      this.#completionId = ev.started.completionId;
    } else if (ev.delta !== undefined) {
      this.#pieces.push({ attempt: ev.attempt, turn: ev.turn, kind: ev.delta.kind, text: ev.delta.text });
    } else if (ev.toolCall !== undefined) {
      this.#calls.push({ turn: ev.turn, call: ev.toolCall });
    } else if (ev.transition !== undefined) {
      this.#transition(ev.transition, ev.attempt);
    } else if (ev.result !== undefined) {
      this.#result = ev.result;
    }
    return true;
  }

  #transition(t: Transition, attempt: number): void {
    this.#transitions.push(t);
    if (t.terminal) {
      this.#reason = t.reason;
    }
    if (t.discardOutput) {
      this.#discarded.add(attempt);
    }
    for (const a of t.discardedAttempts) {
      this.#discarded.add(a);
    }
  }

  /** completionId is the completion's id, from its started event ("" before). */
  get completionId(): string {
    return this.#completionId;
  }

  /** lastSeq is the seq of the last event folded (0 before any): the after_seq of an Attach that misses nothing. */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  /** turn is the turn of the latest event folded (0 before any). */
  get turn(): number {
    return this.#turn;
  }

  /** reason is the terminal transition's reason; undefined until it arrives. */
  get reason(): TransitionReason | undefined {
    return this.#reason;
  }

  /** transitions are every transition folded, in order. */
  get transitions(): readonly Transition[] {
    return this.#transitions;
  }

  /**
   * strippedBlocks are the media blocks transitions replaced by a
   * placeholder because an upstream rejected them: every transition's
   * strippedBlocks ("messages[i].content[j]"), in order.
   */
  get strippedBlocks(): string[] {
    return this.#transitions.flatMap((t) => t.strippedBlocks ?? []);
  }

  /** discardedAttempts are the attempts any transition discarded, ascending. */
  get discardedAttempts(): number[] {
    return [...this.#discarded].sort((a, b) => a - b);
  }

  /** isDiscarded reports whether a transition voided the attempt's output. */
  isDiscarded(attempt: number): boolean {
    return this.#discarded.has(attempt);
  }

  /** turns are the kept output of each turn that has some, ascending by turn. */
  get turns(): Turn[] {
    const byTurn = new Map<number, Turn>();
    const at = (n: number): Turn => {
      let t = byTurn.get(n);
      if (t === undefined) {
        t = { turn: n, text: "", thinking: "", toolCalls: [] };
        byTurn.set(n, t);
      }
      return t;
    };
    for (const p of this.#pieces) {
      if (this.#discarded.has(p.attempt)) continue;
      const t = at(p.turn);
      if (p.kind === DeltaKind.DELTA_KIND_THINKING) t.thinking += p.text;
      else t.text += p.text;
    }
    for (const c of this.#calls) {
      at(c.turn).toolCalls.push(c.call);
    }
    return [...byTurn.values()].sort((a, b) => a.turn - b.turn);
  }

  /**
   * text is the answer so far: every kept text delta of every turn, in
   * arrival order. At the end it equals the text of the result's message (in
   * a Session the result's message holds the text of all turns; turns splits it).
   */
  get text(): string {
    return this.#kept((kind) => kind !== DeltaKind.DELTA_KIND_THINKING);
  }

  /** thinking is every kept reasoning delta of every turn, in arrival order. */
  get thinking(): string {
    return this.#kept((kind) => kind === DeltaKind.DELTA_KIND_THINKING);
  }

  /** toolCalls are the tool calls of the latest event's turn. */
  get toolCalls(): ToolCall[] {
    return this.#lastTurn().toolCalls;
  }

  /** result is the completion's result; undefined until it arrives. */
  get result(): Result | undefined {
    return this.#result;
  }

  /** done reports whether the result has arrived. */
  get done(): boolean {
    return this.#result !== undefined;
  }

  /** stopReason is the result's stop reason; undefined without a result. */
  get stopReason(): StopReason | undefined {
    return this.#result?.stopReason;
  }

  /**
   * stopSequence is the request's stop sequence that ended the answer
   * (with STOP_REASON_STOP_SEQUENCE; "" after any other end); undefined
   * without a result.
   */
  get stopSequence(): string | undefined {
    return this.#result?.stopSequence;
  }

  /** truncated is the result's truncated flag (false without a result). */
  get truncated(): boolean {
    return this.#result?.truncated ?? false;
  }

  #kept(want: (kind: DeltaKind) => boolean): string {
    let out = "";
    for (const p of this.#pieces) {
      if (want(p.kind) && !this.#discarded.has(p.attempt)) out += p.text;
    }
    return out;
  }

  #lastTurn(): Turn {
    const last = this.turns.find((t) => t.turn === this.#turn);
    return last ?? { turn: this.#turn, text: "", thinking: "", toolCalls: [] };
  }
}
