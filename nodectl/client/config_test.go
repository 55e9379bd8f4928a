package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/client"
	"github.com/agentcube/sandboxpool/nodectl/nodectltest"
)

func TestWriteConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "sandbox-pool", "node-ctl.json")
	cfg := nodectltest.Config(3, "2", "4Gi")
	cfg.APIVersion = "" // filled in
	cfg.Resources["example.com/gpu"] = "1"
	if err := client.WriteConfig(path, cfg); err != nil {
		t.Fatalf("WriteConfig: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("config file = %v, %v; want mode 0644", fi, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := api.ParseConfig(data)
	if err != nil {
		t.Fatalf("the written file does not parse: %v\n%s", err, data)
	}
	if got.APIVersion != api.APIVersion || got.Generation != 3 || got.Resources["example.com/gpu"] != "1" || got.Pool != cfg.Pool {
		t.Errorf("round trip = %+v", got)
	}

	// Overwriting replaces the file and leaves no temporary file behind.
	if err := client.WriteConfig(path, nodectltest.Config(4, "1", "2Gi")); err != nil {
		t.Fatalf("overwrite: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after two writes, want only the config", len(entries))
	}
	data, _ = os.ReadFile(path)
	if got, err := api.ParseConfig(data); err != nil || got.Generation != 4 {
		t.Errorf("after overwrite = %+v, %v", got, err)
	}
}

func TestWriteConfigRefusesInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node-ctl.json")
	if err := client.WriteConfig(path, nodectltest.Config(1, "1", "1Gi")); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)

	err := client.WriteConfig(path, nodectltest.Config(2, "1", "1Gb"))
	var invalid *api.InvalidConfigError
	if !errors.As(err, &invalid) || invalid.Field() != "resources[memory]" {
		t.Fatalf("WriteConfig of a bad quantity = %v, want *InvalidConfigError on resources[memory]", err)
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(before) {
		t.Errorf("an invalid config replaced the file")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the config", len(entries))
	}
}

func TestWriteConfigUnwritableDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := client.WriteConfig(filepath.Join(file, "node-ctl.json"), nodectltest.Config(1, "1", "1Gi")); err == nil {
		t.Errorf("WriteConfig under a regular file succeeded")
	}
}
