// Command etcd is upstream's etcd server (go.etcd.io/etcd/server/v3, pinned in go.mod), built
// from its published module because etcd's own main package lives in a module that is not
// meant to be imported. It only calls upstream's entry point; the end-to-end tests start it
// with the same flags as the released binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
