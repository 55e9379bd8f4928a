package framework

import "sigs.k8s.io/controller-runtime/pkg/envtest"

func envtestUser(name string, groups ...string) envtest.User {
	return envtest.User{Name: name, Groups: groups}
}
