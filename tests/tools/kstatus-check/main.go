// kstatus-check prints the kstatus verdict (sigs.k8s.io/cli-utils/pkg/kstatus,
// the library Flux, kpt and cli-utils' apply use) for one object: the JSON of
// a Kubernetes object on stdin (`kubectl get ... -o json`), "<Status>|<message>"
// on stdout, e.g. "InProgress|TrainingJobRunning: every replica is running".
// Test infrastructure only: built by tests/cluster/build-kstatus.
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	// Numbers as int64 where they are whole, as the apimachinery decoders give them
	// (encoding/json's float64 fails kstatus's NestedInt64 lookups).
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	// An object is at most a few hundred KiB; 8 MiB bounds a bad input.
	data, err := io.ReadAll(io.LimitReader(os.Stdin, 8<<20))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kstatus-check: reading stdin:", err)
		os.Exit(2)
	}
	var obj map[string]interface{}
	if err := json.Unmarshal(data, &obj); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus-check: not a JSON object:", err)
		os.Exit(2)
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kstatus-check:", err)
		os.Exit(2)
	}
	fmt.Printf("%s|%s\n", res.Status, res.Message)
}
