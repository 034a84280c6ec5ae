package qmp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// conn is one QMP session: connected, greeted, past capabilities negotiation.
type conn struct {
	c      net.Conn
	r      *reader
	nextID int
	stop   func() bool
}

// dial connects to the QMP socket at path and negotiates capabilities. The session
// ends when ctx does: a blocked read or write then fails.
func dial(ctx context.Context, path string) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	c := &conn{c: nc, r: newReader(nc)}
	c.stop = context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	greeting, err := c.r.next()
	if err == nil && greeting.Greeting == nil {
		err = fmt.Errorf("the socket's first message is not a QMP greeting")
	}
	if err == nil {
		err = c.execute("qmp_capabilities", nil, nil)
	}
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *conn) close() {
	c.stop()
	c.c.Close()
}

// execute runs a command and decodes its return into result (when not nil), skipping
// the events that arrive meanwhile.
func (c *conn) execute(command string, args, result any) error {
	c.nextID++
	id := c.nextID
	req := map[string]any{"execute": command, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := c.c.Write(append(line, '\n')); err != nil {
		return err
	}
	for {
		m, err := c.r.next()
		if err != nil {
			return err
		}
		switch {
		case m.Event != "":
			continue
		case m.Greeting != nil:
			return fmt.Errorf("QMP greeting in the middle of a session")
		}
		var got int
		if json.Unmarshal(m.ID, &got) != nil || got != id {
			return fmt.Errorf("QMP answer with id %s to command %d", m.ID, id)
		}
		if m.Error != nil {
			return m.Error
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(m.Return, result)
	}
}
