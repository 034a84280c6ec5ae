package registry

import "github.com/better-compute/better-compute/registry/userdata"

// LoadUserData reads the user-data configuration file `serve --userdata-config` names
// (Config.UserData), so that `serve` reaches the registry through its root alone.
func LoadUserData(path string) (userdata.Config, error) { return userdata.LoadConfig(path) }
