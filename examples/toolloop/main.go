// Command toolloop is a small completiond client that runs a tool loop over
// the Session RPC: the model asks for tools, this program runs them and sends
// the results back, until the model answers.
//
//	make run                          # in one terminal
//	go run ./examples/toolloop        # in another
//
// On the sim provider the tool calls are scripted (sim.faults); with
// --route naming a real model, the model decides.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/completiond/completiond/client"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

func main() {
	addr := flag.String("addr", cmp.Or(os.Getenv("COMPLETIOND_ADDR"), "localhost:50051"), "completiond address (default: COMPLETIOND_ADDR, else localhost:50051)")
	route := flag.String("route", "sim", "route to call")
	question := flag.String("q", "What is the weather in Lisbon and in Oslo?", "the question")
	faults := flag.String("faults", defaultFaults, "the sim's fault script (sim routes only), e.g. tool_reset=get_weather,"+defaultFaults)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *route, *question, *faults, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "toolloop:", err)
		os.Exit(1)
	}
}

// tools are what this client can run for the model.
var tools = map[string]func(input *structpb.Struct) string{
	"get_weather": func(input *structpb.Struct) string {
		city := input.GetFields()["city"].GetStringValue()
		if city == "" {
			city = input.GetFields()["query"].GetStringValue() // the sim passes the question as "query"
		}
		return fmt.Sprintf(`{"city": %q, "forecast": "sunny", "celsius": 21}`, city)
	},
}

// defaultFaults makes the sim call get_weather twice, then answer.
const defaultFaults = "tool_use=get_weather,tool_use=get_weather"

// run answers each tool_call event the moment it arrives: completiond sends
// a call only once the attempt that made it is settled, so every call it
// sends is one the model waits for, whatever failed before. The client
// library's RunSession does the Session protocol; this program only runs
// tools and prints.
func run(ctx context.Context, addr, route, question, faults string, out io.Writer) error {
	c, err := client.Connect(addr, client.ConnectOptions{APIKey: os.Getenv("COMPLETIOND_API_KEY")})
	if err != nil {
		return err
	}
	defer c.Close()
	fold, err := c.RunSession(ctx, start(route, question, faults), client.SessionHandler{
		Tool: func(_ context.Context, call *completionv1.ToolCall) (*completionv1.ToolResultBlock, error) {
			result := runTool(call)
			fmt.Fprintf(out, "\n[tool %s(%s) → %s]\n", call.GetName(), call.GetInput().AsMap(), result.GetText())
			return result, nil
		},
		Event: func(ev *completionv1.CompletionEvent) error { show(ev, out); return nil },
	})
	if err != nil {
		return err
	}
	r := fold.Result()
	fmt.Fprintf(out, "[done: %s, %d attempts, %d output tokens]\n", r.GetStopReason(), len(r.GetAttempts()), r.GetUsage().GetOutputTokens())
	return nil
}

func start(route, question, faults string) *completionv1.SessionStart {
	schema, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string"}}, "required": []any{"city"}})
	req := &completionv1.CompleteRequest{
		Route: route,
		Messages: []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{
			{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: question}}}}}},
		Tools: []*completionv1.Tool{{Name: "get_weather", Description: "Current weather for a city.", InputSchema: schema}},
	}
	if strings.HasPrefix(route, "sim") {
		req.Metadata = map[string]string{"sim.faults": faults, "sim.pace": "5ms"}
	}
	return &completionv1.SessionStart{Request: req, MaxTurns: 5}
}

// show shows the answer's text and each transition as it comes.
func show(ev *completionv1.CompletionEvent, out io.Writer) {
	switch e := ev.GetEvent().(type) {
	case *completionv1.CompletionEvent_Delta:
		fmt.Fprint(out, e.Delta.GetText())
	case *completionv1.CompletionEvent_Transition:
		fmt.Fprintf(out, "\n[%s]\n", strings.TrimPrefix(e.Transition.GetReason().String(), "TRANSITION_REASON_"))
	}
}

func runTool(call *completionv1.ToolCall) *completionv1.ToolResultBlock {
	tool, ok := tools[call.GetName()]
	if !ok {
		return &completionv1.ToolResultBlock{ToolUseId: call.GetId(), Text: "unknown tool " + call.GetName(), IsError: true}
	}
	return &completionv1.ToolResultBlock{ToolUseId: call.GetId(), Text: tool(call.GetInput())}
}
