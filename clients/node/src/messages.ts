// Small builders for the messages every request needs.

import type { Duration } from "./gen/google/protobuf/duration";
import { type Message, Role, type ToolChoice, ToolChoiceMode } from "./gen/completion/v1/completion";

/** userText is a user message of one text block. */
export function userText(text: string): Message {
  return { role: Role.ROLE_USER, content: [{ text: { text } }] };
}

/** duration is a google.protobuf.Duration of the given (fractional) seconds, e.g. resumeGrace: duration(60). */
export function duration(seconds: number): Duration {
  const whole = Math.trunc(seconds);
  return { seconds: whole, nanos: Math.round((seconds - whole) * 1e9) };
}

/** ToolChoiceOptions are what a tool choice may say besides its mode. */
export interface ToolChoiceOptions {
  /** disableParallelToolUse asks for at most one tool call per answer. */
  disableParallelToolUse?: boolean;
}

function toolChoice(mode: ToolChoiceMode, name: string, options: ToolChoiceOptions): ToolChoice {
  return { mode, name, disableParallelToolUse: options.disableParallelToolUse ?? false };
}

/** toolChoiceAuto lets the model decide whether to call a tool (the default), e.g. toolChoice: toolChoiceAuto({ disableParallelToolUse: true }). */
export function toolChoiceAuto(options: ToolChoiceOptions = {}): ToolChoice {
  return toolChoice(ToolChoiceMode.TOOL_CHOICE_MODE_AUTO, "", options);
}

/** toolChoiceAny makes the model call at least one of the request's tools. */
export function toolChoiceAny(options: ToolChoiceOptions = {}): ToolChoice {
  return toolChoice(ToolChoiceMode.TOOL_CHOICE_MODE_ANY, "", options);
}

/** toolChoiceNone forbids tool calls. */
export function toolChoiceNone(options: ToolChoiceOptions = {}): ToolChoice {
  return toolChoice(ToolChoiceMode.TOOL_CHOICE_MODE_NONE, "", options);
}

/** toolChoiceTool makes the model call the tool named name, one of the request's tools. */
export function toolChoiceTool(name: string, options: ToolChoiceOptions = {}): ToolChoice {
  return toolChoice(ToolChoiceMode.TOOL_CHOICE_MODE_TOOL, name, options);
}
