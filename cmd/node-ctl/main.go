// Command node-ctl is the reference node-ctl: it serves the node-ctl contract
// (docs/node-ctl-contract.md) on a unix socket and enforces the pool's cpu and memory on a
// node-level cgroup. SIGTERM or SIGINT stop it gracefully; SIGHUP reloads the config file.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentcube/sandboxpool/nodectl/api"
	"github.com/agentcube/sandboxpool/nodectl/cgroup"
	"github.com/agentcube/sandboxpool/nodectl/server"
)

func main() {
	opts := server.Options{}
	flag.StringVar(&opts.SocketPath, "socket", api.DefaultSocketPath, "unix socket to serve the API on")
	flag.StringVar(&opts.ConfigPath, "config", api.DefaultConfigPath, "config file the agent writes; applied at start and on every reload")
	cgroupPath := flag.String("cgroup-path", api.DefaultCgroupPath, "the slice: the cgroup the pool is enforced in, relative to the cgroup root; a child of kubelet's pod root (docs/node-ctl-contract.md, \"Delivery\")")
	flag.StringVar(&opts.Zone, "zone", "", "zone of this node, reported in the state")
	flag.BoolVar(&opts.DeleteCgroupOnExit, "delete-cgroup-on-exit", false, "delete the cgroup on graceful shutdown if no process is left in it (never on a plain restart)")
	level := slog.LevelInfo
	flag.TextVar(&level, "log-level", level, "log level: DEBUG, INFO, WARN or ERROR")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	opts.Logger = log
	warning, err := api.CheckSlicePath(*cgroupPath)
	if err != nil {
		log.Error("invalid --cgroup-path", "err", err)
		os.Exit(1)
	}
	if warning != "" {
		log.Warn(warning)
	}
	cg, err := cgroup.Open(*cgroupPath)
	if err != nil {
		log.Error("opening the cgroup failed", "err", err)
		os.Exit(1)
	}
	opts.Cgroup = cg
	srv, err := server.New(opts)
	if err != nil {
		log.Error("invalid options", "err", err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			_, _ = srv.Reload() // logs its outcome
		}
	}()
	if err := srv.Run(ctx); err != nil {
		log.Error("node-ctl failed", "err", err)
		os.Exit(1)
	}
}
