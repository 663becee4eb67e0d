package views

// SettingsSection is one entry of the settings area's section nav: one per route.
type SettingsSection struct {
	Path, Label, TestID string
	AdminOnly           bool
}

// SettingsSections is the section nav, in order. A section whose page lands later
// (e.g. /settings/activity) is one more entry here, next to its route in web/routes.go.
var SettingsSections = []SettingsSection{
	{Path: "/settings/account", Label: "Account", TestID: "nav-account"},
	{Path: "/memories", Label: "Memories", TestID: "nav-memories"},
	{Path: "/settings/providers", Label: "Providers", TestID: "nav-providers", AdminOnly: true},
	{Path: "/settings/mcp", Label: "MCP servers", TestID: "nav-mcp", AdminOnly: true},
	{Path: "/settings/memories", Label: "All memories", TestID: "nav-admin-memories", AdminOnly: true},
	{Path: "/settings/runs", Label: "Runs", TestID: "nav-admin-runs", AdminOnly: true},
	{Path: "/settings/activity", Label: "Activity", TestID: "nav-activity", AdminOnly: true},
	{Path: "/settings/users", Label: "Users", TestID: "nav-users", AdminOnly: true},
}

// settingsSectionsFor is what u may open: admin sections only for admins.
func settingsSectionsFor(u *User) []SettingsSection {
	var out []SettingsSection
	for _, s := range SettingsSections {
		if u != nil && (!s.AdminOnly || u.IsAdmin) {
			out = append(out, s)
		}
	}
	return out
}
