module github.com/better-compute/better-compute

go 1.26.8

require (
	github.com/coreos/ignition/v2 v2.24.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/insomniacslk/dhcp v0.0.0-20260901064844-234b97448fae // indirect
	github.com/josharian/native v1.1.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/pierrec/lz4/v4 v4.1.14 // indirect
	github.com/pin/tftp/v3 v3.2.0 // indirect
	github.com/quic-go/quic-go v0.65.0 // indirect
	github.com/stmcginnis/gofish v0.24.0 // indirect
	github.com/u-root/uio v0.0.0-20230220225925-ffce2a382923 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
