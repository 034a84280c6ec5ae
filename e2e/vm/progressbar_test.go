package vm

import "testing"

// TestProgressBar: the image stream's progress line becomes a bar at its percentage;
// other lines pass unchanged.
func TestProgressBar(t *testing.T) {
	for line, want := range map[string]string{
		"steps[6]         deploy.deploy              ramdisk        running  13.5 MiB of 27.0 MiB read, 40.0 MiB written": "image stream [###############...............]  50%  13.5 MiB of 27.0 MiB read, 40.0 MiB written",
		"steps[6]         deploy.deploy              ramdisk        running  27.0 MiB of 27.0 MiB read, 64.0 MiB written": "image stream [##############################] 100%  27.0 MiB of 27.0 MiB read, 64.0 MiB written",
		"steps[6]         deploy.deploy              ramdisk        running  512 B of 2.0 KiB read, 1.0 KiB written":      "image stream [#######.......................]  25%  512 B of 2.0 KiB read, 1.0 KiB written",
		"steps[0]         userdata.render                           succeeded  0s":                                        "steps[0]         userdata.render                           succeeded  0s",
	} {
		if got := progressBar(line); got != want {
			t.Errorf("progressBar(%q)\n got %q\nwant %q", line, got, want)
		}
	}
}
