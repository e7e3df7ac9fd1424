module github.com/leasebus/leasebus/durability-lab

go 1.25.0

require go.etcd.io/bbolt v1.5.0

require golang.org/x/sys v0.45.0 // indirect

replace github.com/leasebus/leasebus => ../
