package bmc

import "context"

// VirtualMedia attaches an ISO image to a machine as a CD/DVD drive.
type VirtualMedia interface {
	// Insert attaches the image at url, write-protected, replacing any image inserted
	// before. A machine without a virtual CD/DVD answers UNSUPPORTED having changed
	// nothing: the caller then boots the image another way (iPXE sanboot from the site
	// cache).
	Insert(ctx context.Context, url string) error
	// Eject removes the inserted image; nothing happens when there is none. It is
	// UNSUPPORTED like Insert.
	Eject(ctx context.Context) error
}
