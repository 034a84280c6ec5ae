package qmp

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// blockDevice is one entry of query-block.
type blockDevice struct {
	QDev      string `json:"qdev"`
	Removable bool   `json:"removable"`
	Inserted  *struct {
		File  string `json:"file"`
		Image struct {
			VirtualSize int64 `json:"virtual-size"`
		} `json:"image"`
	} `json:"inserted"`
}

// named reports whether the entry is the device with qdev id (qemu gives the id, or a
// QOM path ending in it).
func (b blockDevice) named(id string) bool {
	return b.QDev == id || strings.HasSuffix(b.QDev, "/"+id)
}

// name is the device's id, or its QOM path when it has none.
func (b blockDevice) name() string {
	rest, ok := strings.CutPrefix(b.QDev, "/machine/peripheral/")
	if !ok {
		return b.QDev
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

func queryBlock(c *conn) ([]blockDevice, error) {
	var list []blockDevice
	err := c.execute("query-block", nil, &list)
	return list, err
}

// mediaFile turns an image URL into what qemu opens: the path of a file:// URL or an
// absolute path, or an http(s) URL as it is (which needs qemu's curl block driver).
func mediaFile(image string) (string, error) {
	if filepath.IsAbs(image) {
		return image, nil
	}
	u, err := url.Parse(image)
	switch {
	case err != nil:
	case u.Scheme == "file" && u.Host == "" && filepath.IsAbs(u.Path):
		return u.Path, nil
	case (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
		return image, nil
	}
	return "", proto.Errorf(proto.InvalidConfig, "virtual media image %q is not an absolute path or a file, http or https URL", image).WithPath("url")
}

// Insert puts the image in the CD drive (option cd), read-only, with
// blockdev-change-medium, ejecting any medium first.
func (d *driver) Insert(ctx context.Context, image string) error {
	file, err := mediaFile(image)
	if err != nil {
		return err
	}
	cd, err := d.option(optCD, "CD drive for virtual media")
	if err != nil {
		return err
	}
	return d.session(ctx, "insert media", func(c *conn) error {
		if err := eject(c, cd); err != nil {
			return err
		}
		d.log.Info("insert media", "device", cd, "image", image)
		return c.execute("blockdev-change-medium", map[string]any{
			"id": cd, "filename": file, "format": "raw", "read-only-mode": "read-only",
		}, nil)
	})
}

// Eject ejects the CD drive's medium, forcing a tray the guest has locked.
func (d *driver) Eject(ctx context.Context) error {
	cd, err := d.option(optCD, "CD drive for virtual media")
	if err != nil {
		return err
	}
	return d.session(ctx, "eject media", func(c *conn) error { return eject(c, cd) })
}

func eject(c *conn, cd string) error {
	devices, err := queryBlock(c)
	if err != nil {
		return err
	}
	for _, b := range devices {
		if b.named(cd) && b.Inserted != nil {
			return c.execute("eject", map[string]any{"id": cd, "force": true}, nil)
		}
	}
	return nil
}
