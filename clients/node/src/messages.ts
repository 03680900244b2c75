// Small builders for the messages every request needs.

import type { Duration } from "./gen/google/protobuf/duration";
import {
  type ContentBlock,
  type DeepPartial,
  type Message,
  type PromptCache,
  PromptCacheMode,
  Role,
  type Tool,
  type ToolChoice,
  ToolChoiceMode,
} from "./gen/completion/v1/completion";

/**
 * userText is a user message of one text block, followed by blocks, if any:
 * images, documents (imageUrlBlock, documentBlock …).
 */
export function userText(text: string, ...blocks: ContentBlock[]): Message {
  return { role: Role.ROLE_USER, content: [textBlock(text), ...blocks] };
}

/** textBlock is a content block of text. */
export function textBlock(text: string): ContentBlock {
  return { text: { text }, cacheBreakpoint: false };
}

/** bytes is data as the generated messages hold it: a Buffer (the same memory when it is one). */
function bytes(data: Uint8Array): Buffer {
  return Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

/** imageBlock is a content block of an inline image: mediaType is image/png, image/jpeg, image/gif or image/webp. */
export function imageBlock(mediaType: string, data: Uint8Array): ContentBlock {
  return { image: { mediaType, data: bytes(data), url: "" }, cacheBreakpoint: false };
}

/** imageUrlBlock is a content block of an image by its https URL, which the provider fetches (completiond never does). */
export function imageUrlBlock(url: string): ContentBlock {
  return { image: { mediaType: "", data: Buffer.alloc(0), url }, cacheBreakpoint: false };
}

/** DocumentOptions are what a document block may say besides its content. */
export interface DocumentOptions {
  /** title names the document for the model. */
  title?: string;
}

/** documentBlock is a content block of a PDF document (Anthropic routes), e.g. documentBlock(pdf, { title: "Spec" }). */
export function documentBlock(data: Uint8Array, options: DocumentOptions = {}): ContentBlock {
  return {
    document: { mediaType: "application/pdf", data: bytes(data), url: "", title: options.title ?? "" },
    cacheBreakpoint: false,
  };
}

/** documentUrlBlock is a content block of a PDF document by its https URL, which the provider fetches (completiond never does). */
export function documentUrlBlock(url: string, options: DocumentOptions = {}): ContentBlock {
  return { document: { mediaType: "", data: Buffer.alloc(0), url, title: options.title ?? "" }, cacheBreakpoint: false };
}

/**
 * cacheBreakpoint marks a content block or a tool as a prompt cache
 * breakpoint of the caller's (its cacheBreakpoint) and returns it: the
 * conversation up to and including the block, or the tools up to and
 * including the tool, are cached. The server honours the caller's marks with
 * promptCacheAuto (the default) and promptCacheCaller, and refuses them with
 * promptCacheOff.
 */
export function cacheBreakpoint<T extends DeepPartial<ContentBlock> | DeepPartial<Tool>>(item: T): T {
  item.cacheBreakpoint = true;
  return item;
}

/** PromptCacheOptions are what a prompt cache setting may say besides its mode. */
export interface PromptCacheOptions {
  /** system marks the end of the system prompt (and the tools before it) as a breakpoint of the caller's. */
  system?: boolean;
}

/** promptCacheAuto lets completiond place the breakpoints, after the caller's own marks (the default), e.g. promptCache: promptCacheAuto({ system: true }). */
export function promptCacheAuto(options: PromptCacheOptions = {}): PromptCache {
  return { mode: PromptCacheMode.PROMPT_CACHE_MODE_AUTO, system: options.system ?? false };
}

/** promptCacheOff sends no breakpoint (the server refuses the caller's marks with it). */
export function promptCacheOff(): PromptCache {
  return { mode: PromptCacheMode.PROMPT_CACHE_MODE_OFF, system: false };
}

/** promptCacheCaller sends the caller's marks only: cacheBreakpoint's, and system. */
export function promptCacheCaller(options: PromptCacheOptions = {}): PromptCache {
  return { mode: PromptCacheMode.PROMPT_CACHE_MODE_CALLER, system: options.system ?? false };
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
