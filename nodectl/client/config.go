package client

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentcube/sandboxpool/nodectl/api"
)

// configMode is the config file's mode: it holds no secret, and operators read it.
const configMode = 0o644

// WriteConfig validates cfg (an empty APIVersion becomes api.APIVersion) and writes it to
// path atomically: a temporary file in the same directory, fsync, rename, fsync of the
// directory. node-ctl therefore reads either the old or the new config, never a mix, even
// across a crash. The directory is created if missing. An invalid cfg is an
// *api.InvalidConfigError and nothing is written.
func WriteConfig(path string, cfg api.Config) error {
	if cfg.APIVersion == "" {
		cfg.APIVersion = api.APIVersion
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("writing node-ctl config %s: %w", path, err)
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding node-ctl config: %w", err)
	}
	if err := writeFileAtomic(path, append(data, '\n')); err != nil {
		return fmt.Errorf("writing node-ctl config %s: %w", path, err)
	}
	return nil
}

func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Chmod(configMode); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
