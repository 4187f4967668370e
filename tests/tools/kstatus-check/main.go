// kstatus-check prints a health verdict for one object: the JSON of a
// Kubernetes object on stdin (`kubectl get ... -o json`), "<Status>|<message>"
// on stdout, e.g. "InProgress|every replica is running".
//
//	kstatus-check                  kstatus (sigs.k8s.io/cli-utils/pkg/kstatus: what Flux,
//	                               kpt and cli-utils' apply compute for a custom resource)
//	kstatus-check flux FILE        Flux's CEL health check (github.com/fluxcd/pkg/runtime/cel,
//	                               what kustomize-controller runs) with the healthCheckExprs
//	                               entry for the object's apiVersion and kind in FILE, a Flux
//	                               Kustomization (YAML); the message is empty
//
// Test infrastructure only: built by tests/cluster/build-kstatus.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	fluxkustomize "github.com/fluxcd/pkg/apis/kustomize"
	fluxcel "github.com/fluxcd/pkg/runtime/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	// Numbers as int64 where they are whole, as the apimachinery decoders give them
	// (encoding/json's float64 fails kstatus's NestedInt64 lookups).
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kstatus-check: "+format+"\n", args...)
	os.Exit(2)
}

// An object or a Kustomization is at most a few hundred KiB; 8 MiB bounds a bad input.
const maxInput = 8 << 20

func readObject() *unstructured.Unstructured {
	data, err := io.ReadAll(io.LimitReader(os.Stdin, maxInput))
	if err != nil {
		die("reading stdin: %v", err)
	}
	var obj map[string]interface{}
	if err := json.Unmarshal(data, &obj); err != nil {
		die("not a JSON object: %v", err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func flux(path string, u *unstructured.Unstructured) {
	f, err := os.Open(path)
	if err != nil {
		die("%v", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxInput))
	f.Close()
	if err != nil {
		die("reading %s: %v", path, err)
	}
	var ks struct {
		Spec struct {
			HealthCheckExprs []struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				fluxkustomize.HealthCheckExpressions
			} `json:"healthCheckExprs"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &ks); err != nil {
		die("%s: %v", path, err)
	}
	for _, c := range ks.Spec.HealthCheckExprs {
		if c.APIVersion != u.GetAPIVersion() || c.Kind != u.GetKind() {
			continue
		}
		ev, err := fluxcel.NewStatusEvaluator(&c.HealthCheckExpressions)
		if err != nil {
			die("%s: %v", path, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := ev.Evaluate(ctx, u)
		if err != nil {
			die("evaluating %s's expressions: %v", c.Kind, err)
		}
		fmt.Printf("%s|%s\n", res.Status, res.Message)
		return
	}
	die("%s has no healthCheckExprs for %s %s", path, u.GetAPIVersion(), u.GetKind())
}

func main() {
	u := readObject()
	if len(os.Args) == 3 && os.Args[1] == "flux" {
		flux(os.Args[2], u)
		return
	}
	if len(os.Args) != 1 {
		die("usage: kstatus-check [flux KUSTOMIZATION.yaml] < object.json")
	}
	res, err := status.Compute(u)
	if err != nil {
		die("%v", err)
	}
	fmt.Printf("%s|%s\n", res.Status, res.Message)
}
