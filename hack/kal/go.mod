// Tools module of kube-api-linter and its driver (hack/kal/*.go): make lint, and so make
// verify, builds it into the versioned tools dir and runs it on the API types with
// hack/kal/kal.yaml. Apart from hack/lint so that its requirements do not move
// golangci-lint's; golang.org/x/tools, x/mod and x/sync are at hack/lint's versions, so its
// build reuses the packages golangci-lint's build compiled (docs/benchmarks.md, "Capacity").
module github.com/agentcube/sandboxpool/hack/kal

go 1.26.0

require (
	golang.org/x/tools v0.52.0
	sigs.k8s.io/kube-api-linter v0.0.0-20260716143926-092fe0c72997
	sigs.k8s.io/yaml v1.4.0
)

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	k8s.io/apimachinery v0.32.3 // indirect
	k8s.io/gengo/v2 v2.0.0-20250922181213-ec3ebc5fd46b // indirect
	k8s.io/utils v0.0.0-20241104100929-3ea5e8cea738 // indirect
)
