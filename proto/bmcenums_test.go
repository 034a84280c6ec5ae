package proto

import (
	"fmt"
	"testing"
)

func TestParseBMCEnums(t *testing.T) {
	for _, a := range PowerActions {
		if got, err := ParsePowerAction(string(a)); err != nil || got != a {
			t.Errorf("ParsePowerAction(%s) = %s, %v", a, got, err)
		}
	}
	for _, d := range BootDevices {
		if got, err := ParseBootDevice(string(d)); err != nil || got != d {
			t.Errorf("ParseBootDevice(%s) = %s, %v", d, got, err)
		}
	}
	if _, err := ParsePowerAction("On"); CodeOf(err) != InvalidConfig {
		t.Errorf("ParsePowerAction(On): %v", err)
	}
	if _, err := ParseBootDevice("usb"); CodeOf(err) != InvalidConfig {
		t.Errorf("ParseBootDevice(usb): %v", err)
	}
}

func TestPowerActionsThatBoot(t *testing.T) {
	var boots []PowerAction
	for _, a := range PowerActions {
		if a.Boots() {
			boots = append(boots, a)
		}
	}
	if got, want := fmt.Sprint(boots), "[on reset graceful-restart cycle]"; got != want {
		t.Errorf("the actions that boot are %s, want %s", got, want)
	}
}
