package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"atrium/assets"
	"atrium/internal/errs"
)

// routes is the one route table. Read it top to bottom: public endpoints first, then
// what needs a login, then what needs an admin.
func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = s.clientIP // X-Forwarded-For only from trusted proxies
	e.HTTPErrorHandler = s.handleError
	e.Use(s.recoverPanics, s.securityHeaders, s.limitBody, s.loadLogin, s.checkCSRF, s.requireSetup)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/assets/*", echo.WrapHandler(assets.Handler()))
	if s.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(s.Metrics))
	}

	e.GET("/setup", s.showSetup)
	e.POST("/setup", s.submitSetup)
	e.GET("/login", s.showLogin)
	e.POST("/login", s.submitLogin)
	e.POST("/logout", s.logout)

	u := e.Group("", s.requireUser)
	u.GET("/", s.showHome)
	u.GET("/sessions", s.listSessions)
	u.GET("/search", s.searchChats)
	u.POST("/sessions", s.createSession)
	u.GET("/sessions/export", s.exportChats)
	u.POST("/sessions/import", s.importChats)
	u.GET("/s/:id", s.showChat)
	u.GET("/s/:id/messages", s.olderMessages)
	u.GET("/s/:id/export", s.exportChat)
	u.GET("/s/:id/runs/:rid", s.showRun)
	u.GET("/s/:id/runs/:rid/spans/:seq", s.showRunSpan)
	u.GET("/s/:id/newer", s.newerMessages)
	u.POST("/s/:id/rename", s.renameSession)
	u.POST("/s/:id/delete", s.deleteSession)
	u.POST("/s/:id/model", s.setSessionModel)
	u.POST("/s/:id/stop", s.stopSession)
	u.POST("/s/:id/task", s.saveTask)
	u.POST("/s/:id/instructions", s.setChatInstructions)
	u.GET("/s/:id/ws", s.chatSocket)
	u.POST("/s/:id/files", s.uploadFile)
	u.GET("/files/:fid", s.showFile)
	u.POST("/files/:fid/delete", s.removeFile)
	u.GET("/s/:id/resources", s.resourcePanel)
	u.GET("/s/:id/prompts", s.promptMenu)
	u.POST("/s/:id/prompt", s.usePrompt)
	u.POST("/s/:id/consent/:qid", s.answerConsent)
	u.POST("/s/:id/memories/:mid/undo", s.undoSave)
	u.POST("/runs/:rid/pin", s.pinRun)
	u.GET("/s/:id/runs/:rid/spans/:seq/replay", s.showReplay)
	u.POST("/s/:id/runs/:rid/spans/:seq/replay", s.runReplay)
	u.POST("/s/:id/runs/:rid/spans/:seq/fork", s.forkRun)
	u.GET("/settings/account", s.showAccount)
	u.POST("/settings/account/theme", s.setTheme)
	u.POST("/settings/account/instructions", s.setInstructions)
	u.POST("/settings/account/password", s.changePassword)
	u.GET("/runs/:rid/export", s.exportRun)
	u.GET("/memories", s.showMemories)
	u.POST("/memories", s.createMemory)
	u.POST("/memories/delete", s.deleteMemories)
	u.POST("/memories/settings", s.setMemorySettings)
	u.POST("/memories/forget-all", s.forgetAllMemories)
	u.GET("/memories/export", s.exportMemories)
	u.POST("/memories/import", s.importMemories)
	u.POST("/memories/suggestions/:sid/accept", s.acceptSuggestion)
	u.POST("/memories/suggestions/:sid/reject", s.rejectSuggestion)
	u.POST("/memories/:id", s.updateMemory)
	u.POST("/memories/:id/delete", s.deleteMemory)

	a := u.Group("", s.requireAdmin)
	a.GET("/settings/providers", s.showProviders)
	a.POST("/settings/providers", s.createProvider)
	a.POST("/settings/providers/:pid", s.updateProvider)
	a.POST("/settings/providers/:pid/delete", s.deleteProvider)
	a.POST("/settings/providers/:pid/refresh", s.refreshProviderModels)
	a.POST("/settings/default-model", s.setDefaultModel)
	a.GET("/settings/mcp", s.showMCP)
	a.POST("/settings/mcp", s.createMCPServer)
	a.GET("/settings/mcp/ws", s.mcpSocket)
	a.GET("/settings/mcp/export", s.exportMCP)
	a.POST("/settings/mcp/import", s.importMCP)
	a.GET("/settings/mcp/oauth/callback", s.finishMCPOAuth)
	a.POST("/settings/mcp/:sid", s.updateMCPServer)
	a.POST("/settings/mcp/:sid/enable", s.enableMCPServer)
	a.POST("/settings/mcp/:sid/disable", s.disableMCPServer)
	a.POST("/settings/mcp/:sid/delete", s.deleteMCPServer)
	a.POST("/settings/mcp/:sid/oauth", s.startMCPOAuth)

	// Other users' memories: admins only, and a 404 to everyone else (hideFromNonAdmins).
	am := u.Group("/settings/memories", s.hideFromNonAdmins)
	am.GET("", s.showAdminMemories)
	am.POST("/instance", s.saveMemoryInstance)
	am.POST("/instance/test", s.testMemoryEmbeddings)
	am.GET("/reindex", s.memoryReindexStatus)
	am.POST("/:uid/reveal", s.revealMemories)
	am.POST("/:uid/delete", s.adminDeleteMemories)
	am.POST("/:uid/forget-all", s.adminForgetAll)

	// The user accounts: admins only, a 404 to everyone else. Old links to /admin/users
	// keep working (a permanent redirect, which a browser caches).
	us := u.Group("/settings/users", s.hideFromNonAdmins)
	us.GET("", s.showUsers)
	us.POST("", s.createUser)
	us.POST("/:uid/disable", s.disableUser)
	us.POST("/:uid/enable", s.enableUser)
	us.POST("/:uid/reset", s.resetUserPassword)
	us.POST("/:uid/role", s.setUserRole)
	us.POST("/:uid/delete", s.deleteUser)
	u.GET("/admin/users", movedTo("/settings/users"))

	// Every user's runs: admins only, a 404 to everyone else, like the memories.
	ar := u.Group("/settings/runs", s.hideFromNonAdmins)
	ar.GET("", s.showAdminRuns)
	ar.POST("/import", s.importRun)
	ar.GET("/:rid", s.showAdminRun)
	ar.POST("/:rid/reveal", s.revealRun)
	// Charts of every user's runs: admins only, like the runs.
	u.GET("/settings/activity", s.showActivity, s.hideFromNonAdmins)

	e.RouteNotFound("/*", func(c echo.Context) error { return echo.ErrNotFound })
	return e
}

// movedTo answers a GET of an old address with a permanent redirect to its new one,
// keeping the query (e.g. ?notice=).
func movedTo(path string) echo.HandlerFunc {
	return func(c echo.Context) error {
		to := path
		if q := c.Request().URL.RawQuery; q != "" {
			to += "?" + q
		}
		return c.Redirect(http.StatusMovedPermanently, to)
	}
}

func (s *Server) healthz(c echo.Context) error { return c.String(http.StatusOK, "ok\n") }

func (s *Server) readyz(c echo.Context) error {
	if err := s.ready(c.Request().Context()); err != nil {
		s.Log.Warn("web: not ready", "err", err)
		msg := "database unavailable"
		if errs.Is(err, errs.Storage) {
			msg = errs.Message(err)
		}
		return c.String(http.StatusServiceUnavailable, "not ready: "+msg+"\n")
	}
	return c.String(http.StatusOK, "ready\n")
}
