from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

ATTEMPT_OUTCOME_ANSWERED: AttemptOutcome
ATTEMPT_OUTCOME_DISCARDED: AttemptOutcome
ATTEMPT_OUTCOME_FAILED: AttemptOutcome
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
DELIVERY_MODE_LIVE: DeliveryMode
DELIVERY_MODE_SETTLED: DeliveryMode
DELIVERY_MODE_UNSPECIFIED: DeliveryMode
DELTA_KIND_TEXT: DeltaKind
DELTA_KIND_THINKING: DeltaKind
DELTA_KIND_UNSPECIFIED: DeltaKind
DESCRIPTOR: _descriptor.FileDescriptor
ERROR_KIND_AUTH: ErrorKind
ERROR_KIND_CIRCUIT_OPEN: ErrorKind
ERROR_KIND_CONNECTION: ErrorKind
ERROR_KIND_CONTENT_FILTER: ErrorKind
ERROR_KIND_CONTEXT_LIMIT: ErrorKind
ERROR_KIND_INVALID_REQUEST: ErrorKind
ERROR_KIND_MEDIA: ErrorKind
ERROR_KIND_NOT_FOUND: ErrorKind
ERROR_KIND_OVERLOADED: ErrorKind
ERROR_KIND_PREFILL_REJECTED: ErrorKind
ERROR_KIND_PROMPT_TOO_LONG: ErrorKind
ERROR_KIND_QUOTA: ErrorKind
ERROR_KIND_RATE_LIMIT: ErrorKind
ERROR_KIND_REPLICA_LOST: ErrorKind
ERROR_KIND_SERVER: ErrorKind
ERROR_KIND_STREAM_BROKEN: ErrorKind
ERROR_KIND_TIMEOUT: ErrorKind
ERROR_KIND_UNSPECIFIED: ErrorKind
PROMPT_CACHE_MODE_AUTO: PromptCacheMode
PROMPT_CACHE_MODE_CALLER: PromptCacheMode
PROMPT_CACHE_MODE_OFF: PromptCacheMode
PROMPT_CACHE_MODE_UNSPECIFIED: PromptCacheMode
REASONING_EFFORT_HIGH: ReasoningEffort
REASONING_EFFORT_LOW: ReasoningEffort
REASONING_EFFORT_MEDIUM: ReasoningEffort
REASONING_EFFORT_MINIMAL: ReasoningEffort
REASONING_EFFORT_UNSPECIFIED: ReasoningEffort
ROLE_ASSISTANT: Role
ROLE_UNSPECIFIED: Role
ROLE_USER: Role
STOP_REASON_CONTENT_FILTER: StopReason
STOP_REASON_END_TURN: StopReason
STOP_REASON_MAX_TOKENS: StopReason
STOP_REASON_PAUSE_TURN: StopReason
STOP_REASON_REFUSAL: StopReason
STOP_REASON_STOP_SEQUENCE: StopReason
STOP_REASON_TOOL_USE: StopReason
STOP_REASON_UNSPECIFIED: StopReason
STRUCTURED_OUTPUT_MODE_NATIVE: StructuredOutputMode
STRUCTURED_OUTPUT_MODE_NATIVE_OR_TOOL: StructuredOutputMode
STRUCTURED_OUTPUT_MODE_STOP_HOOK: StructuredOutputMode
STRUCTURED_OUTPUT_MODE_TOOL: StructuredOutputMode
STRUCTURED_OUTPUT_MODE_UNSPECIFIED: StructuredOutputMode
TOOL_CHOICE_MODE_ANY: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_TOOL: ToolChoiceMode
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TRANSITION_REASON_ABORTED_STREAMING: TransitionReason
TRANSITION_REASON_ABORTED_TOOLS: TransitionReason
TRANSITION_REASON_AUTO_COMPACT: TransitionReason
TRANSITION_REASON_BLOCKING_LIMIT: TransitionReason
TRANSITION_REASON_BUDGET_EXCEEDED: TransitionReason
TRANSITION_REASON_COLLAPSE_DRAIN_RETRY: TransitionReason
TRANSITION_REASON_COMPLETED: TransitionReason
TRANSITION_REASON_CONTEXT_LIMIT_ADJUST: TransitionReason
TRANSITION_REASON_HOOK_STOPPED: TransitionReason
TRANSITION_REASON_IMAGE_ERROR: TransitionReason
TRANSITION_REASON_MAX_OUTPUT_TOKENS_ESCALATE: TransitionReason
TRANSITION_REASON_MAX_OUTPUT_TOKENS_RECOVERY: TransitionReason
TRANSITION_REASON_MAX_TURNS: TransitionReason
TRANSITION_REASON_MODEL_ERROR: TransitionReason
TRANSITION_REASON_MODEL_FALLBACK: TransitionReason
TRANSITION_REASON_NEXT_TURN: TransitionReason
TRANSITION_REASON_PROMPT_TOO_LONG: TransitionReason
TRANSITION_REASON_REACTIVE_COMPACT_RETRY: TransitionReason
TRANSITION_REASON_RETRY: TransitionReason
TRANSITION_REASON_STOP_HOOK_BLOCKING: TransitionReason
TRANSITION_REASON_STOP_HOOK_PREVENTED: TransitionReason
TRANSITION_REASON_STREAM_RESUME: TransitionReason
TRANSITION_REASON_TOKEN_BUDGET_CONTINUATION: TransitionReason
TRANSITION_REASON_UNSPECIFIED: TransitionReason
VERDICT_ALLOW: Verdict
VERDICT_BLOCK: Verdict
VERDICT_PREVENT: Verdict
VERDICT_UNSPECIFIED: Verdict

class AttachRequest(_message.Message):
    __slots__ = ["after_seq", "completion_id"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    completion_id: str
    def __init__(self, completion_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class AttemptUsage(_message.Message):
    __slots__ = ["attempt", "cost_known", "cost_usd", "model", "outcome", "route", "usage"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COST_KNOWN_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    cost_known: bool
    cost_usd: float
    model: str
    outcome: AttemptOutcome
    route: str
    usage: Usage
    def __init__(self, attempt: _Optional[int] = ..., route: _Optional[str] = ..., model: _Optional[str] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., cost_usd: _Optional[float] = ..., cost_known: bool = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ["reason"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ["completion_id"]
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    completion_id: str
    def __init__(self, completion_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ["already_ended", "code", "reason", "result_seq"]
    ALREADY_ENDED_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESULT_SEQ_FIELD_NUMBER: _ClassVar[int]
    already_ended: bool
    code: int
    reason: TransitionReason
    result_seq: int
    def __init__(self, already_ended: bool = ..., reason: _Optional[_Union[TransitionReason, str]] = ..., code: _Optional[int] = ..., result_seq: _Optional[int] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ["delivery", "fallback_routes", "idempotency_key", "max_output_tokens", "max_total_output_tokens", "messages", "metadata", "output_json_schema", "policy", "prompt_cache", "reasoning", "resume_grace", "route", "seed", "stop_sequences", "system", "temperature", "token_budget", "tool_choice", "tools", "top_k", "top_p"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_ROUTES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CACHE_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    RESUME_GRACE_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    delivery: DeliveryMode
    fallback_routes: _containers.RepeatedScalarFieldContainer[str]
    idempotency_key: str
    max_output_tokens: int
    max_total_output_tokens: int
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    metadata: _containers.ScalarMap[str, str]
    output_json_schema: str
    policy: Policy
    prompt_cache: PromptCache
    reasoning: Reasoning
    resume_grace: _duration_pb2.Duration
    route: str
    seed: int
    stop_sequences: _containers.RepeatedScalarFieldContainer[str]
    system: str
    temperature: float
    token_budget: int
    tool_choice: ToolChoice
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    top_k: int
    top_p: float
    def __init__(self, route: _Optional[str] = ..., fallback_routes: _Optional[_Iterable[str]] = ..., system: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., max_output_tokens: _Optional[int] = ..., token_budget: _Optional[int] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., output_json_schema: _Optional[str] = ..., delivery: _Optional[_Union[DeliveryMode, str]] = ..., resume_grace: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., stop_sequences: _Optional[_Iterable[str]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., max_total_output_tokens: _Optional[int] = ..., reasoning: _Optional[_Union[Reasoning, _Mapping]] = ..., prompt_cache: _Optional[_Union[PromptCache, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ["completion_id", "result", "transitions"]
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    completion_id: str
    result: Result
    transitions: _containers.RepeatedCompositeFieldContainer[Transition]
    def __init__(self, completion_id: _Optional[str] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., transitions: _Optional[_Iterable[_Union[Transition, _Mapping]]] = ...) -> None: ...

class CompletionEvent(_message.Message):
    __slots__ = ["attempt", "delta", "result", "seq", "started", "stop_hook_request", "tool_call", "transition", "turn", "usage"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STOP_HOOK_REQUEST_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TRANSITION_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    delta: TokenDelta
    result: Result
    seq: int
    started: Started
    stop_hook_request: StopHookRequest
    tool_call: ToolCall
    transition: Transition
    turn: int
    usage: Usage
    def __init__(self, seq: _Optional[int] = ..., attempt: _Optional[int] = ..., turn: _Optional[int] = ..., started: _Optional[_Union[Started, _Mapping]] = ..., delta: _Optional[_Union[TokenDelta, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCall, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., transition: _Optional[_Union[Transition, _Mapping]] = ..., stop_hook_request: _Optional[_Union[StopHookRequest, _Mapping]] = ..., result: _Optional[_Union[Result, _Mapping]] = ...) -> None: ...

class ContentBlock(_message.Message):
    __slots__ = ["cache_breakpoint", "document", "image", "text", "thinking", "tool_result", "tool_use"]
    CACHE_BREAKPOINT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_FIELD_NUMBER: _ClassVar[int]
    cache_breakpoint: bool
    document: DocumentBlock
    image: ImageBlock
    text: TextBlock
    thinking: ThinkingBlock
    tool_result: ToolResultBlock
    tool_use: ToolUseBlock
    def __init__(self, text: _Optional[_Union[TextBlock, _Mapping]] = ..., image: _Optional[_Union[ImageBlock, _Mapping]] = ..., tool_use: _Optional[_Union[ToolUseBlock, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResultBlock, _Mapping]] = ..., document: _Optional[_Union[DocumentBlock, _Mapping]] = ..., thinking: _Optional[_Union[ThinkingBlock, _Mapping]] = ..., cache_breakpoint: bool = ...) -> None: ...

class DocumentBlock(_message.Message):
    __slots__ = ["data", "media_type", "title", "url"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    media_type: str
    title: str
    url: str
    def __init__(self, media_type: _Optional[str] = ..., data: _Optional[bytes] = ..., url: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class ImageBlock(_message.Message):
    __slots__ = ["data", "media_type", "url"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    media_type: str
    url: str
    def __init__(self, media_type: _Optional[str] = ..., data: _Optional[bytes] = ..., url: _Optional[str] = ...) -> None: ...

class ListRoutesRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListRoutesResponse(_message.Message):
    __slots__ = ["routes"]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    routes: _containers.RepeatedCompositeFieldContainer[RouteInfo]
    def __init__(self, routes: _Optional[_Iterable[_Union[RouteInfo, _Mapping]]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ["content", "role"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[ContentBlock]
    role: Role
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., content: _Optional[_Iterable[_Union[ContentBlock, _Mapping]]] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ["backoff_base", "backoff_max", "disable_compaction", "disable_escalation", "disable_fallback", "fallback_retries", "fallback_wait", "max_continuations", "max_retries", "max_stop_hook_blocks", "max_turns", "overloads_before_fallback", "retry_after_ceiling"]
    BACKOFF_BASE_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MAX_FIELD_NUMBER: _ClassVar[int]
    DISABLE_COMPACTION_FIELD_NUMBER: _ClassVar[int]
    DISABLE_ESCALATION_FIELD_NUMBER: _ClassVar[int]
    DISABLE_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_RETRIES_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_WAIT_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTINUATIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_STOP_HOOK_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    OVERLOADS_BEFORE_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_CEILING_FIELD_NUMBER: _ClassVar[int]
    backoff_base: _duration_pb2.Duration
    backoff_max: _duration_pb2.Duration
    disable_compaction: bool
    disable_escalation: bool
    disable_fallback: bool
    fallback_retries: int
    fallback_wait: _duration_pb2.Duration
    max_continuations: int
    max_retries: int
    max_stop_hook_blocks: int
    max_turns: int
    overloads_before_fallback: int
    retry_after_ceiling: _duration_pb2.Duration
    def __init__(self, max_retries: _Optional[int] = ..., backoff_base: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., backoff_max: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., overloads_before_fallback: _Optional[int] = ..., max_continuations: _Optional[int] = ..., disable_escalation: bool = ..., disable_compaction: bool = ..., max_turns: _Optional[int] = ..., max_stop_hook_blocks: _Optional[int] = ..., disable_fallback: bool = ..., fallback_retries: _Optional[int] = ..., fallback_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_after_ceiling: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PromptCache(_message.Message):
    __slots__ = ["mode", "system"]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    mode: PromptCacheMode
    system: bool
    def __init__(self, mode: _Optional[_Union[PromptCacheMode, str]] = ..., system: bool = ...) -> None: ...

class Reasoning(_message.Message):
    __slots__ = ["budget_tokens", "effort", "interleaved"]
    BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EFFORT_FIELD_NUMBER: _ClassVar[int]
    INTERLEAVED_FIELD_NUMBER: _ClassVar[int]
    budget_tokens: int
    effort: ReasoningEffort
    interleaved: bool
    def __init__(self, budget_tokens: _Optional[int] = ..., effort: _Optional[_Union[ReasoningEffort, str]] = ..., interleaved: bool = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ["attempts", "cost_known", "cost_usd", "error", "message", "model", "reason", "route", "stop_reason", "stop_sequence", "transcript", "truncated", "usage"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    COST_KNOWN_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedCompositeFieldContainer[AttemptUsage]
    cost_known: bool
    cost_usd: float
    error: UpstreamError
    message: Message
    model: str
    reason: TransitionReason
    route: str
    stop_reason: StopReason
    stop_sequence: str
    transcript: _containers.RepeatedCompositeFieldContainer[Message]
    truncated: bool
    usage: Usage
    def __init__(self, reason: _Optional[_Union[TransitionReason, str]] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., truncated: bool = ..., route: _Optional[str] = ..., model: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[AttemptUsage, _Mapping]]] = ..., error: _Optional[_Union[UpstreamError, _Mapping]] = ..., transcript: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., stop_sequence: _Optional[str] = ..., cost_usd: _Optional[float] = ..., cost_known: bool = ...) -> None: ...

class RouteCapabilities(_message.Message):
    __slots__ = ["cache_breakpoints", "caches_by_itself", "disable_parallel_tool_use", "documents", "image_url", "interleaved_thinking", "max_reasoning_effort", "max_stop_sequences", "max_temperature", "max_thinking_budget", "min_top_p", "names_stop_sequence", "prefill", "reasoning_effort", "seed", "structured_output", "thinking_budget", "tool_choice_modes", "top_k", "top_p"]
    CACHES_BY_ITSELF_FIELD_NUMBER: _ClassVar[int]
    CACHE_BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    DISABLE_PARALLEL_TOOL_USE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_URL_FIELD_NUMBER: _ClassVar[int]
    INTERLEAVED_THINKING_FIELD_NUMBER: _ClassVar[int]
    MAX_REASONING_EFFORT_FIELD_NUMBER: _ClassVar[int]
    MAX_STOP_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    MAX_TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_THINKING_BUDGET_FIELD_NUMBER: _ClassVar[int]
    MIN_TOP_P_FIELD_NUMBER: _ClassVar[int]
    NAMES_STOP_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PREFILL_FIELD_NUMBER: _ClassVar[int]
    REASONING_EFFORT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    THINKING_BUDGET_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_MODES_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    cache_breakpoints: bool
    caches_by_itself: bool
    disable_parallel_tool_use: bool
    documents: bool
    image_url: bool
    interleaved_thinking: bool
    max_reasoning_effort: ReasoningEffort
    max_stop_sequences: int
    max_temperature: float
    max_thinking_budget: int
    min_top_p: float
    names_stop_sequence: bool
    prefill: bool
    reasoning_effort: bool
    seed: bool
    structured_output: StructuredOutputMode
    thinking_budget: bool
    tool_choice_modes: _containers.RepeatedScalarFieldContainer[ToolChoiceMode]
    top_k: bool
    top_p: bool
    def __init__(self, max_temperature: _Optional[float] = ..., top_p: bool = ..., min_top_p: _Optional[float] = ..., top_k: bool = ..., seed: bool = ..., max_stop_sequences: _Optional[int] = ..., names_stop_sequence: bool = ..., tool_choice_modes: _Optional[_Iterable[_Union[ToolChoiceMode, str]]] = ..., disable_parallel_tool_use: bool = ..., thinking_budget: bool = ..., max_thinking_budget: _Optional[int] = ..., reasoning_effort: bool = ..., max_reasoning_effort: _Optional[_Union[ReasoningEffort, str]] = ..., interleaved_thinking: bool = ..., structured_output: _Optional[_Union[StructuredOutputMode, str]] = ..., cache_breakpoints: bool = ..., caches_by_itself: bool = ..., image_url: bool = ..., documents: bool = ..., prefill: bool = ...) -> None: ...

class RouteInfo(_message.Message):
    __slots__ = ["capabilities", "circuit_open", "circuit_retry_after", "context_window", "fallback_routes", "is_default", "max_output_tokens", "model", "name", "provider", "thinking", "thinking_budget"]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_OPEN_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_ROUTES_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    THINKING_BUDGET_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    capabilities: RouteCapabilities
    circuit_open: bool
    circuit_retry_after: _duration_pb2.Duration
    context_window: int
    fallback_routes: _containers.RepeatedScalarFieldContainer[str]
    is_default: bool
    max_output_tokens: int
    model: str
    name: str
    provider: str
    thinking: bool
    thinking_budget: int
    def __init__(self, name: _Optional[str] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., context_window: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., fallback_routes: _Optional[_Iterable[str]] = ..., is_default: bool = ..., thinking: bool = ..., thinking_budget: _Optional[int] = ..., capabilities: _Optional[_Union[RouteCapabilities, _Mapping]] = ..., circuit_open: bool = ..., circuit_retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ["cancel", "resume", "start", "stop_hook_verdict", "tool_results"]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_HOOK_VERDICT_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULTS_FIELD_NUMBER: _ClassVar[int]
    cancel: Cancel
    resume: SessionResume
    start: SessionStart
    stop_hook_verdict: StopHookVerdict
    tool_results: ToolResults
    def __init__(self, start: _Optional[_Union[SessionStart, _Mapping]] = ..., tool_results: _Optional[_Union[ToolResults, _Mapping]] = ..., stop_hook_verdict: _Optional[_Union[StopHookVerdict, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., resume: _Optional[_Union[SessionResume, _Mapping]] = ...) -> None: ...

class SessionResume(_message.Message):
    __slots__ = ["after_seq", "completion_id"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    completion_id: str
    def __init__(self, completion_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class SessionStart(_message.Message):
    __slots__ = ["max_turns", "request", "stop_hook"]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    STOP_HOOK_FIELD_NUMBER: _ClassVar[int]
    max_turns: int
    request: CompleteRequest
    stop_hook: bool
    def __init__(self, request: _Optional[_Union[CompleteRequest, _Mapping]] = ..., max_turns: _Optional[int] = ..., stop_hook: bool = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ["completion_id", "model", "provider", "route", "trace_id"]
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    completion_id: str
    model: str
    provider: str
    route: str
    trace_id: str
    def __init__(self, completion_id: _Optional[str] = ..., route: _Optional[str] = ..., model: _Optional[str] = ..., provider: _Optional[str] = ..., trace_id: _Optional[str] = ...) -> None: ...

class StopHookRequest(_message.Message):
    __slots__ = ["answer", "hook_id"]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    HOOK_ID_FIELD_NUMBER: _ClassVar[int]
    answer: Message
    hook_id: str
    def __init__(self, hook_id: _Optional[str] = ..., answer: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class StopHookVerdict(_message.Message):
    __slots__ = ["hook_id", "message", "verdict"]
    HOOK_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    hook_id: str
    message: str
    verdict: Verdict
    def __init__(self, hook_id: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., message: _Optional[str] = ...) -> None: ...

class TextBlock(_message.Message):
    __slots__ = ["text"]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ThinkingBlock(_message.Message):
    __slots__ = ["model", "redacted_data", "signature", "thinking"]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REDACTED_DATA_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    model: str
    redacted_data: bytes
    signature: str
    thinking: str
    def __init__(self, thinking: _Optional[str] = ..., signature: _Optional[str] = ..., redacted_data: _Optional[bytes] = ..., model: _Optional[str] = ...) -> None: ...

class TokenDelta(_message.Message):
    __slots__ = ["kind", "text"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    kind: DeltaKind
    text: str
    def __init__(self, kind: _Optional[_Union[DeltaKind, str]] = ..., text: _Optional[str] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ["cache_breakpoint", "description", "input_schema", "name"]
    CACHE_BREAKPOINT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    cache_breakpoint: bool
    description: str
    input_schema: _struct_pb2.Struct
    name: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., cache_breakpoint: bool = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ["id", "input", "name"]
    ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    input: _struct_pb2.Struct
    name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ["disable_parallel_tool_use", "mode", "name"]
    DISABLE_PARALLEL_TOOL_USE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    disable_parallel_tool_use: bool
    mode: ToolChoiceMode
    name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., name: _Optional[str] = ..., disable_parallel_tool_use: bool = ...) -> None: ...

class ToolResultBlock(_message.Message):
    __slots__ = ["halt", "is_error", "text", "tool_use_id"]
    HALT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    halt: bool
    is_error: bool
    text: str
    tool_use_id: str
    def __init__(self, tool_use_id: _Optional[str] = ..., text: _Optional[str] = ..., is_error: bool = ..., halt: bool = ...) -> None: ...

class ToolResults(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ToolResultBlock]
    def __init__(self, results: _Optional[_Iterable[_Union[ToolResultBlock, _Mapping]]] = ...) -> None: ...

class ToolUseBlock(_message.Message):
    __slots__ = ["id", "input", "name"]
    ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    input: _struct_pb2.Struct
    name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Transition(_message.Message):
    __slots__ = ["backoff", "discard_output", "discarded_attempts", "error", "from_model", "from_route", "max_tokens", "message", "reason", "retry", "stripped_blocks", "terminal", "to_model", "to_route"]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    DISCARDED_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DISCARD_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FROM_MODEL_FIELD_NUMBER: _ClassVar[int]
    FROM_ROUTE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    STRIPPED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    TO_MODEL_FIELD_NUMBER: _ClassVar[int]
    TO_ROUTE_FIELD_NUMBER: _ClassVar[int]
    backoff: _duration_pb2.Duration
    discard_output: bool
    discarded_attempts: _containers.RepeatedScalarFieldContainer[int]
    error: UpstreamError
    from_model: str
    from_route: str
    max_tokens: int
    message: str
    reason: TransitionReason
    retry: int
    stripped_blocks: _containers.RepeatedScalarFieldContainer[str]
    terminal: bool
    to_model: str
    to_route: str
    def __init__(self, reason: _Optional[_Union[TransitionReason, str]] = ..., terminal: bool = ..., discard_output: bool = ..., backoff: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., from_route: _Optional[str] = ..., from_model: _Optional[str] = ..., to_route: _Optional[str] = ..., to_model: _Optional[str] = ..., max_tokens: _Optional[int] = ..., error: _Optional[_Union[UpstreamError, _Mapping]] = ..., message: _Optional[str] = ..., retry: _Optional[int] = ..., discarded_attempts: _Optional[_Iterable[int]] = ..., stripped_blocks: _Optional[_Iterable[str]] = ...) -> None: ...

class UpstreamError(_message.Message):
    __slots__ = ["code", "http_status", "kind", "message", "provider", "request_id", "retry_after", "type"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    code: str
    http_status: int
    kind: ErrorKind
    message: str
    provider: str
    request_id: str
    retry_after: _duration_pb2.Duration
    type: str
    def __init__(self, kind: _Optional[_Union[ErrorKind, str]] = ..., provider: _Optional[str] = ..., http_status: _Optional[int] = ..., type: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., request_id: _Optional[str] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ["cache_creation_input_tokens", "cache_read_input_tokens", "input_tokens", "output_tokens"]
    CACHE_CREATION_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    input_tokens: int
    output_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_read_input_tokens: _Optional[int] = ..., cache_creation_input_tokens: _Optional[int] = ...) -> None: ...

class StructuredOutputMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ReasoningEffort(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class PromptCacheMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DeliveryMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DeltaKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TransitionReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ErrorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
