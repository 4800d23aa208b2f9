package natsembed

import "github.com/orisun-io/orisun/internal/testhooks"

// The negative control's seam (testhooks.Hooks.PermissionsOff) is set
// through package internal/testhooks, so that Config has no exported field
// that could switch the permission model off.
func init() {
	testhooks.NATSPermissionsOff = func(c *Config) { c.permissionsOff = true }
}
