package harness

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// debugOverlay is the file added to cmd/completiond in the benchmark's
// build: it starts debugserver from the environment.
//
//go:embed completiond_debug.go.txt
var debugOverlay []byte

// buildCompletiond builds cmd/completiond of the module the working
// directory is in, with debugOverlay added, into dir; it returns the
// binary's path. The server's own code is unchanged: the added file only
// serves goroutine counts and pprof when LOADBENCH_DEBUG_ADDR is set.
func buildCompletiond(ctx context.Context, goCmd, dir string) (string, error) {
	root, err := moduleRoot(ctx, goCmd)
	if err != nil {
		return "", err
	}
	stub := filepath.Join(dir, "zz_loadbench_debug.go")
	if err := os.WriteFile(stub, debugOverlay, 0o644); err != nil {
		return "", err
	}
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{
		filepath.Join(root, "cmd", "completiond", "zz_loadbench_debug.go"): stub}})
	if err != nil {
		return "", err
	}
	ovPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovPath, overlay, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "completiond")
	cmd := exec.CommandContext(ctx, goCmd, "build", "-overlay", ovPath, "-o", bin, "./cmd/completiond")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building completiond: %v\n%s", err, out)
	}
	return bin, nil
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(ctx context.Context, goCmd string) (string, error) {
	out, err := exec.CommandContext(ctx, goCmd, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the completiond module: run from the repository")
	}
	return filepath.Dir(mod), nil
}
