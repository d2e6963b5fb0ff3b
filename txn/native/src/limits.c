/* Resource limits of the native server, the rules of txn/rpc/limits.py: unfinished frames
 * share a memory budget granted first come, first served; a frame begun must be complete
 * within frame_timeout_s; a connection idle for idle_timeout_s is closed. */
#include "server.h"

int conn_paused_by_server(const Conn *c) {
    return c->draining || c->blocked || c->budget_wait || conn_sending_out(c);
}

int budget_reserve(Server *s, Conn *c, int64_t size) {
    if (s->budget_head == NULL && s->budget_used + size <= s->budget_capacity) {
        s->budget_used += size;
        c->reserved = size;
        return 1;
    }
    c->budget_wait = 1;
    c->budget_need = size;
    c->bnext = NULL;
    if (s->budget_tail != NULL) s->budget_tail->bnext = c;
    else s->budget_head = c;
    s->budget_tail = c;
    return 0;
}

void budget_release(Server *s, int64_t size) {
    s->budget_used -= size;
    while (s->budget_head != NULL &&
           s->budget_used + s->budget_head->budget_need <= s->budget_capacity) {
        Conn *c = s->budget_head;
        s->budget_head = c->bnext;
        if (s->budget_head == NULL) s->budget_tail = NULL;
        s->budget_used += c->budget_need;
        c->reserved = c->budget_need;
        c->budget_wait = 0;
        c->partial_since = monotonic_now();
        conn_resumed(s, c);
    }
}

void budget_give_back(Server *s, Conn *c) {
    if (c->reserved == 0) return;
    int64_t size = c->reserved;
    c->reserved = 0;
    budget_release(s, size);
}

void budget_forget(Server *s, Conn *c) {
    if (!c->budget_wait) return;
    Conn **at = &s->budget_head, *prev = NULL;
    while (*at != NULL && *at != c) {
        prev = *at;
        at = &(*at)->bnext;
    }
    if (*at == c) {
        *at = c->bnext;
        if (s->budget_tail == c) s->budget_tail = prev;
    }
    c->budget_wait = 0;
}

double limits_period(const Server *s) {
    double shortest = 0;
    if (s->frame_timeout_s > 0) shortest = s->frame_timeout_s;
    if (s->idle_timeout_s > 0 && (shortest == 0 || s->idle_timeout_s < shortest))
        shortest = s->idle_timeout_s;
    if (shortest == 0) return 0;
    double period = shortest / 4;
    return period < 0.05 ? 0.05 : period > 1.0 ? 1.0 : period;
}

void limits_sweep(Server *s, double now) {
    char reason[96];
    for (Conn *c = s->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (conn_paused_by_server(c)) continue;
        if (c->partial_since > 0 && s->frame_timeout_s > 0) {
            if (now - c->partial_since > s->frame_timeout_s) {
                snprintf(reason, sizeof reason, "a frame unfinished after %g s", s->frame_timeout_s);
                conn_close(s, c, reason);
            }
        } else if (s->idle_timeout_s > 0 && c->head == NULL &&
                   now - c->last_rx > s->idle_timeout_s) {
            snprintf(reason, sizeof reason, "idle for %g s", s->idle_timeout_s);
            conn_close(s, c, reason);
        }
    }
}
