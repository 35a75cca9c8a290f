package kube

import (
	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
)

// client-go logs through klog, to stderr in its own format unless told
// otherwise: the reflector's retries, watches ending, errors it handles
// itself. Run gives its informers Logger's logger through their context;
// what client-go logs through klog's global logger (utilruntime.HandleError)
// goes where the owner points it (serve: klog.SetLogger(Logger(log))).

// Logger returns a logr.Logger writing to log: client-go's errors at warn
// level (each is one it retries, or handles), its V(0) messages at debug
// level and its verbose ones not at all, so that pdlb's log says what
// pdlb does (noteCall logs the API failing) and stays in its format.
func Logger(log zerolog.Logger) logr.Logger {
	return logr.New(&logSink{log: log.With().Str("from", "client-go").Logger()})
}

// logSink is the logr.LogSink of Logger.
type logSink struct {
	log  zerolog.Logger
	name string
}

func (s *logSink) Init(logr.RuntimeInfo) {}

func (s *logSink) Enabled(level int) bool {
	return level == 0 && s.log.GetLevel() <= zerolog.DebugLevel
}

func (s *logSink) Info(_ int, msg string, kv ...any) {
	withFields(s.log.Debug(), kv).Msg(msg)
}

func (s *logSink) Error(err error, msg string, kv ...any) {
	withFields(s.log.Warn().Err(err), kv).Msg(msg)
}

func (s *logSink) WithValues(kv ...any) logr.LogSink {
	ctx := s.log.With()
	for i := 0; i+1 < len(kv); i += 2 {
		key, _ := kv[i].(string)
		if err, ok := kv[i+1].(error); ok {
			ctx = ctx.AnErr(key, err)
			continue
		}
		ctx = ctx.Interface(key, kv[i+1])
	}
	return &logSink{log: ctx.Logger(), name: s.name}
}

func (s *logSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &logSink{log: s.log.With().Str("logger", name).Logger(), name: name}
}

// withFields adds the key-value pairs kv to e.
func withFields(e *zerolog.Event, kv []any) *zerolog.Event {
	for i := 0; i+1 < len(kv); i += 2 {
		key, _ := kv[i].(string)
		if err, ok := kv[i+1].(error); ok {
			e = e.AnErr(key, err) // its text: as an interface, most errors show as {}
			continue
		}
		e = e.Interface(key, kv[i+1])
	}
	return e
}
