package relay

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// Config configures a Server.
type Config struct {
	// BaseURL is the upstream's Chat Completions base, with its /v1.
	BaseURL string
	// Model is the upstream model of a request that names no route; a
	// request's route, when set, is its upstream model (the relay has no
	// route table).
	Model string
	// APIKey is sent as the bearer token.
	APIKey string
}

// Server is the bare relay.
type Server struct {
	completionv1.UnimplementedCompletionServer
	chat  sdk.ChatCompletionService
	model string
	ids   atomic.Uint64
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	return &Server{
		chat: sdk.NewChatCompletionService(
			option.WithBaseURL(cfg.BaseURL),
			option.WithHTTPClient(&http.Client{}),
			option.WithMaxRetries(0),
			option.WithAPIKey(cfg.APIKey),
		),
		model: cfg.Model,
	}
}

// Stream calls the upstream once and forwards its answer. An upstream
// failure ends the RPC UNAVAILABLE: nothing is retried.
func (s *Server) Stream(req *completionv1.CompleteRequest, st grpc.ServerStreamingServer[completionv1.CompletionEvent]) error {
	e := &emitter{st: st}
	id := "relay_" + strconv.FormatUint(s.ids.Add(1), 10)
	model := s.model
	if req.GetRoute() != "" {
		model = req.GetRoute()
	}
	if err := e.send(&completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{
		CompletionId: id, Route: req.GetRoute(), Model: model, Provider: "openai"}}}); err != nil {
		return err
	}
	stream := s.chat.NewStreaming(st.Context(), s.params(req, model))
	defer stream.Close()
	a := answer{stop: completionv1.StopReason_STOP_REASON_END_TURN}
	for stream.Next() {
		if err := a.chunk(e, stream.Current()); err != nil {
			return err
		}
	}
	if err := stream.Err(); err != nil {
		return status.Error(codes.Unavailable, "upstream: "+err.Error())
	}
	return a.finish(e, req.GetRoute(), model)
}

// params maps the request's system prompt and text blocks to Chat
// Completions: all the benchmark sends.
func (s *Server) params(req *completionv1.CompleteRequest, model string) sdk.ChatCompletionNewParams {
	msgs := make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.GetMessages())+1)
	if req.GetSystem() != "" {
		msgs = append(msgs, sdk.SystemMessage(req.GetSystem()))
	}
	for _, m := range req.GetMessages() {
		var text strings.Builder
		for _, b := range m.GetContent() {
			text.WriteString(b.GetText().GetText())
		}
		if m.GetRole() == completionv1.Role_ROLE_ASSISTANT {
			msgs = append(msgs, sdk.AssistantMessage(text.String()))
		} else {
			msgs = append(msgs, sdk.UserMessage(text.String()))
		}
	}
	p := sdk.ChatCompletionNewParams{
		Model:         model,
		Messages:      msgs,
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	}
	if req.MaxOutputTokens != nil {
		p.MaxCompletionTokens = sdk.Int(int64(req.GetMaxOutputTokens()))
	}
	return p
}

// answer accumulates what the result reports.
type answer struct {
	text  strings.Builder
	usage *completionv1.Usage
	stop  completionv1.StopReason
}

// chunk forwards one chunk's text and keeps its finish reason and usage.
func (a *answer) chunk(e *emitter, c sdk.ChatCompletionChunk) error {
	for _, ch := range c.Choices {
		if d := ch.Delta.Content; d != "" {
			a.text.WriteString(d)
			if err := e.send(&completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Delta{Delta: &completionv1.TokenDelta{
				Kind: completionv1.DeltaKind_DELTA_KIND_TEXT, Text: d}}}); err != nil {
				return err
			}
		}
		if ch.FinishReason == "length" {
			a.stop = completionv1.StopReason_STOP_REASON_MAX_TOKENS
		}
	}
	if c.JSON.Usage.Valid() {
		a.usage = &completionv1.Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens}
	}
	return nil
}

// finish sends the usage, the terminal transition and the result.
func (a *answer) finish(e *emitter, route, model string) error {
	done := completionv1.TransitionReason_TRANSITION_REASON_COMPLETED
	if a.usage == nil {
		a.usage = &completionv1.Usage{}
	}
	if err := e.send(&completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Usage{Usage: a.usage}}); err != nil {
		return err
	}
	if err := e.send(&completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Transition{Transition: &completionv1.Transition{
		Reason: done, Terminal: true}}}); err != nil {
		return err
	}
	msg := &completionv1.Message{Role: completionv1.Role_ROLE_ASSISTANT, Content: []*completionv1.ContentBlock{
		{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: a.text.String()}}}}}
	return e.send(&completionv1.CompletionEvent{Event: &completionv1.CompletionEvent_Result{Result: &completionv1.Result{
		Reason: done, Message: msg, StopReason: a.stop, Route: route, Model: model, Usage: a.usage}}})
}

// emitter numbers the events of one completion, all of its one attempt.
type emitter struct {
	st  grpc.ServerStreamingServer[completionv1.CompletionEvent]
	seq uint64
}

// send numbers ev and sends it.
func (e *emitter) send(ev *completionv1.CompletionEvent) error {
	e.seq++
	ev.Seq, ev.Attempt, ev.Turn = e.seq, 1, 1
	return e.st.Send(ev)
}
