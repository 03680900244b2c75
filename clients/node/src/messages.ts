// Small builders for the messages every request needs.

import type { Duration } from "./gen/google/protobuf/duration";
import { type Message, Role } from "./gen/completion/v1/completion";

/** userText is a user message of one text block. */
export function userText(text: string): Message {
  return { role: Role.ROLE_USER, content: [{ text: { text } }] };
}

/** duration is a google.protobuf.Duration of the given (fractional) seconds, e.g. resumeGrace: duration(60). */
export function duration(seconds: number): Duration {
  const whole = Math.trunc(seconds);
  return { seconds: whole, nanos: Math.round((seconds - whole) * 1e9) };
}
