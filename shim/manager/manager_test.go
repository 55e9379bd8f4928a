package manager

import (
	"os"
	"path/filepath"
	"testing"
)

// The shim is built from cmd/<BinaryName>: containerd runs a runtime type's shim by the name
// it derives from the type, so the command's directory must carry that name.
func TestBinaryNameIsTheCommand(t *testing.T) {
	if _, err := os.Stat(filepath.Join("..", "..", "cmd", BinaryName, "main.go")); err != nil {
		t.Errorf("containerd runs %s for %s, and no command builds it: %v", BinaryName, RuntimeName, err)
	}
}
