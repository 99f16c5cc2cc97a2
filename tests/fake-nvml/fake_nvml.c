/*
 * fake_nvml.c - a scripted stand-in for libnvidia-ml.so, for tests on
 * machines without an NVIDIA GPU.
 *
 * Build:  cc -shared -fPIC -O1 -o libfake-nvml.so fake_nvml.c
 *
 * The exported functions follow the signatures and struct layouts of the
 * real nvml.h, so a program that dlopen()s this file instead of
 * libnvidia-ml.so (for example through nvml-wrapper's
 * `Nvml::builder().lib_path(..)`) sees a driver whose devices, utilisation,
 * memory and per-process data come from the script named by the
 * environment variable MLPROF_FAKE_NVML_SCRIPT.  See README.md next to this
 * file for the script format.
 *
 * Only libc is used.  Every exported function takes one global mutex
 * (pthread mutexes live in libc on every glibc this project targets).
 */

#define _GNU_SOURCE

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Types and constants, as in nvml.h                                         */
/* ------------------------------------------------------------------------ */

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

_Static_assert(sizeof(nvmlReturn_t) == 4, "nvmlReturn_t is a C enum (c_uint in the bindings)");

/* Opaque to callers; here it is one slot of the static device table. */
struct nvmlDevice_st {
    unsigned int index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;
_Static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t layout");

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");

#define NVML_STRUCT_VERSION(data, ver) \
    (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

typedef struct nvmlProcessInfo_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t layout");

typedef struct nvmlProcessInfo_v2_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;
_Static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t layout");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t layout");

typedef struct nvmlProcessUtilizationSample_st {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32,
               "nvmlProcessUtilizationSample_t layout");

#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_VALUE_NOT_AVAILABLE_U32 0xFFFFFFFFu

/* ------------------------------------------------------------------------ */
/* Script model                                                              */
/* ------------------------------------------------------------------------ */

#define SCRIPT_ENV "MLPROF_FAKE_NVML_SCRIPT"

#define MAX_DEVICES 8
#define MAX_ROWS 256
#define MAX_PROCS_PER_ROW 32
#define MAX_WORD 64
#define MAX_PATH_LEN 4096
#define MAX_SCRIPT_BYTES (1024 * 1024)
/* Upper bound on processes reported for one device in one call, after
 * `child` / `desc` have been expanded; extra ones are dropped. */
#define MAX_EXPANDED 256
/* Upper bound on processes looked at when walking /proc. */
#define MAX_PROC_SCAN 32768

enum pid_kind { PID_FIXED, PID_CHILD, PID_DESC };

struct proc_spec {
    enum pid_kind kind;
    unsigned int pid;
    unsigned long long mem;
    unsigned int sm;
};

enum key_kind { KEY_TIME, KEY_STATE };

struct row {
    enum key_kind kind;
    double t;                  /* KEY_TIME: seconds after init */
    char state[MAX_WORD];      /* KEY_STATE: state word */
    unsigned int dev;
    unsigned int util;
    unsigned long long mem_used;
    unsigned int nprocs;
    struct proc_spec procs[MAX_PROCS_PER_ROW];
    int line;
};

struct device {
    char name[NVML_DEVICE_NAME_BUFFER_SIZE];
    unsigned long long total;
};

struct expanded_proc {
    unsigned int pid;
    unsigned long long mem;
    unsigned int sm;
};

struct current {
    unsigned int util;
    unsigned long long mem_used;
    unsigned int nprocs;
    struct expanded_proc procs[MAX_EXPANDED];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned int g_refcount;         /* nvmlInit minus nvmlShutdown */
static unsigned int g_ndev;
static struct device g_devs[MAX_DEVICES];
static struct nvmlDevice_st g_handles[MAX_DEVICES];
static unsigned int g_nrows;
static struct row g_rows[MAX_ROWS];
static char g_state_path[MAX_PATH_LEN]; /* empty: no state file */
static long long g_fail_after = -1;     /* -1: never fail */
static unsigned long long g_period_us;  /* 0: a fresh utilisation sample on every call */
static unsigned long long g_sampling_calls;
static int g_failed;                    /* fail_after has tripped */
static struct timespec g_t0;            /* CLOCK_MONOTONIC at init */
static unsigned long long g_last_stamp; /* last sample timestamp handed out */

/* Scratch space, used only under g_lock. */
static struct current g_cur;
static char g_iobuf[8192];
static unsigned int g_scan_pid[MAX_PROC_SCAN];
static unsigned int g_scan_ppid[MAX_PROC_SCAN];

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static void warnmsg(const char *path, int line, const char *msg, const char *what)
{
    if (line > 0)
        fprintf(stderr, "fake-nvml: %s:%d: %s%s%s\n", path, line, msg,
                what ? ": " : "", what ? what : "");
    else
        fprintf(stderr, "fake-nvml: %s%s%s%s%s\n", path ? path : "", path ? ": " : "", msg,
                what ? ": " : "", what ? what : "");
}

/* Parses a whole token as an unsigned decimal number. */
static int parse_u64(const char *s, unsigned long long *out)
{
    char *end;
    if (!isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_u32(const char *s, unsigned int *out)
{
    unsigned long long v;
    if (parse_u64(s, &v) != 0 || v > 0xFFFFFFFFull)
        return -1;
    *out = (unsigned int)v;
    return 0;
}

static int parse_percent(const char *s, unsigned int *out)
{
    if (parse_u32(s, out) != 0 || *out > 100)
        return -1;
    return 0;
}

/* Reads up to cap-1 bytes of a file with open/read/close; NUL-terminates.
 * Returns the length, or -1 if the file cannot be opened or read. */
static ssize_t read_small_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    return (ssize_t)len;
}

static double elapsed_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - g_t0.tv_sec) + (double)(now.tv_nsec - g_t0.tv_nsec) / 1e9;
}

/* CLOCK_REALTIME in microseconds, forced to increase strictly from one
 * call to the next so that every call has a fresh timestamp. */
static unsigned long long next_stamp_us(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    unsigned long long us =
        (unsigned long long)now.tv_sec * 1000000ull + (unsigned long long)now.tv_nsec / 1000ull;
    if (us <= g_last_stamp)
        us = g_last_stamp + 1;
    g_last_stamp = us;
    return us;
}

static void copy_word(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ------------------------------------------------------------------------ */
/* Script parsing                                                            */
/* ------------------------------------------------------------------------ */

#define MAX_TOKENS (5 + MAX_PROCS_PER_ROW + 1)

/* Splits one line (modified in place) into whitespace-separated tokens,
 * stopping at '#'.  Returns the count, or -1 if there are too many. */
static int tokenize(char *line, char **tok, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\v' || *p == '\f')
            p++;
        if (*p == '\0' || *p == '#')
            return n;
        if (n == max)
            return -1;
        tok[n++] = p;
        while (*p != '\0' && *p != '#' && !isspace((unsigned char)*p))
            p++;
        if (*p == '#') {
            *p = '\0';
            return n;
        }
        if (*p != '\0')
            *p++ = '\0';
    }
}

static int parse_proc_spec(const char *path, int line, char *tok, struct proc_spec *ps)
{
    char *c1 = strchr(tok, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2 || strchr(c2 + 1, ':')) {
        warnmsg(path, line, "process entry must be PID:MEM_BYTES:SM_UTIL", tok);
        return -1;
    }
    *c1 = '\0';
    *c2 = '\0';
    const char *spid = tok, *smem = c1 + 1, *ssm = c2 + 1;
    if (strcmp(spid, "child") == 0) {
        ps->kind = PID_CHILD;
        ps->pid = 0;
    } else if (strcmp(spid, "desc") == 0) {
        ps->kind = PID_DESC;
        ps->pid = 0;
    } else if (parse_u32(spid, &ps->pid) == 0 && ps->pid > 0) {
        ps->kind = PID_FIXED;
    } else {
        warnmsg(path, line, "process id must be a decimal pid, 'child' or 'desc'", spid);
        return -1;
    }
    if (parse_u64(smem, &ps->mem) != 0) {
        warnmsg(path, line, "bad process memory (decimal bytes expected)", smem);
        return -1;
    }
    if (parse_percent(ssm, &ps->sm) != 0) {
        warnmsg(path, line, "bad process SM utilisation (0..100 expected)", ssm);
        return -1;
    }
    return 0;
}

static int parse_row(const char *path, int line, char **tok, int ntok)
{
    if (ntok < 5) {
        warnmsg(path, line, "row needs: row KEY DEV UTIL MEM_USED [PID:MEM:SM ...]", NULL);
        return -1;
    }
    if (g_nrows == MAX_ROWS) {
        warnmsg(path, line, "too many rows (limit 256)", NULL);
        return -1;
    }
    if (ntok - 5 > MAX_PROCS_PER_ROW) {
        warnmsg(path, line, "too many processes in one row (limit 32)", NULL);
        return -1;
    }
    struct row *r = &g_rows[g_nrows];
    memset(r, 0, sizeof(*r));
    r->line = line;

    const char *key = tok[1];
    if (key[0] == 't') {
        char *end;
        errno = 0;
        r->kind = KEY_TIME;
        r->t = strtod(key + 1, &end);
        if (key[1] == '\0' || *end != '\0' || errno != 0 || !(r->t >= 0.0) ||
            r->t > 1e12) {
            warnmsg(path, line, "bad time key (expected tSECONDS, e.g. t0 or t1.5)", key);
            return -1;
        }
    } else if (key[0] == 's') {
        r->kind = KEY_STATE;
        if (key[1] == '\0' || strlen(key + 1) >= MAX_WORD) {
            warnmsg(path, line, "bad state key (expected sNAME, NAME 1..63 chars)", key);
            return -1;
        }
        copy_word(r->state, sizeof(r->state), key + 1);
    } else {
        warnmsg(path, line, "row key must start with 't' (time) or 's' (state)", key);
        return -1;
    }
    if (parse_u32(tok[2], &r->dev) != 0 || r->dev >= MAX_DEVICES) {
        warnmsg(path, line, "bad device index", tok[2]);
        return -1;
    }
    if (parse_percent(tok[3], &r->util) != 0) {
        warnmsg(path, line, "bad device utilisation (0..100 expected)", tok[3]);
        return -1;
    }
    if (parse_u64(tok[4], &r->mem_used) != 0) {
        warnmsg(path, line, "bad device memory used (decimal bytes expected)", tok[4]);
        return -1;
    }
    for (int i = 5; i < ntok; i++) {
        if (parse_proc_spec(path, line, tok[i], &r->procs[r->nprocs]) != 0)
            return -1;
        r->nprocs++;
    }
    g_nrows++;
    return 0;
}

static int rows_same_key(const struct row *a, const struct row *b)
{
    if (a->kind != b->kind || a->dev != b->dev)
        return 0;
    if (a->kind == KEY_TIME)
        return a->t == b->t;
    return strcmp(a->state, b->state) == 0;
}

/* Parses the script into the globals.  Returns 0 or -1 (message printed). */
static int parse_script(const char *path, char *text)
{
    int line = 0;
    int have_state = 0, have_fail = 0;
    char *tok[MAX_TOKENS];
    char *p = text;

    while (p != NULL && *p != '\0') {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        line++;
        int ntok = tokenize(p, tok, MAX_TOKENS);
        p = nl ? nl + 1 : NULL;
        if (ntok < 0) {
            warnmsg(path, line, "too many fields (at most 32 processes per row)", NULL);
            return -1;
        }
        if (ntok == 0)
            continue;

        if (strcmp(tok[0], "device") == 0) {
            if (ntok != 3) {
                warnmsg(path, line, "device needs: device NAME TOTAL_BYTES", NULL);
                return -1;
            }
            if (g_ndev == MAX_DEVICES) {
                warnmsg(path, line, "too many devices (limit 8)", NULL);
                return -1;
            }
            if (strlen(tok[1]) >= NVML_DEVICE_NAME_BUFFER_SIZE) {
                warnmsg(path, line, "device name too long (limit 63 characters)", tok[1]);
                return -1;
            }
            struct device *d = &g_devs[g_ndev];
            copy_word(d->name, sizeof(d->name), tok[1]);
            if (parse_u64(tok[2], &d->total) != 0) {
                warnmsg(path, line, "bad device memory total (decimal bytes expected)", tok[2]);
                return -1;
            }
            g_ndev++;
        } else if (strcmp(tok[0], "state") == 0) {
            if (ntok != 2) {
                warnmsg(path, line, "state needs: state PATH (no spaces)", NULL);
                return -1;
            }
            if (have_state) {
                warnmsg(path, line, "state given twice", NULL);
                return -1;
            }
            if (strlen(tok[1]) >= sizeof(g_state_path)) {
                warnmsg(path, line, "state path too long", NULL);
                return -1;
            }
            copy_word(g_state_path, sizeof(g_state_path), tok[1]);
            have_state = 1;
        } else if (strcmp(tok[0], "sample_period_ms") == 0) {
            unsigned long long n;
            if (ntok != 2 || parse_u64(tok[1], &n) != 0 || n > 60000) {
                warnmsg(path, line, "sample_period_ms needs: sample_period_ms N (0..60000)", NULL);
                return -1;
            }
            g_period_us = n * 1000ull;
        } else if (strcmp(tok[0], "fail_after") == 0) {
            unsigned long long n;
            if (ntok != 2 || parse_u64(tok[1], &n) != 0 || n > (unsigned long long)1e15) {
                warnmsg(path, line, "fail_after needs: fail_after N (decimal)", NULL);
                return -1;
            }
            if (have_fail) {
                warnmsg(path, line, "fail_after given twice", NULL);
                return -1;
            }
            g_fail_after = (long long)n;
            have_fail = 1;
        } else if (strcmp(tok[0], "row") == 0) {
            if (parse_row(path, line, tok, ntok) != 0)
                return -1;
        } else {
            warnmsg(path, line, "unknown directive", tok[0]);
            return -1;
        }
    }

    if (g_ndev == 0) {
        warnmsg(path, 0, "the script declares no device", NULL);
        return -1;
    }
    for (unsigned int i = 0; i < g_nrows; i++) {
        if (g_rows[i].dev >= g_ndev) {
            char buf[32];
            snprintf(buf, sizeof(buf), "%u", g_rows[i].dev);
            warnmsg(path, g_rows[i].line, "row names a device that is not declared", buf);
            return -1;
        }
        for (unsigned int j = 0; j < i; j++) {
            if (rows_same_key(&g_rows[i], &g_rows[j])) {
                warnmsg(path, g_rows[i].line, "duplicate row (same key and device)", NULL);
                return -1;
            }
        }
    }
    return 0;
}

static void reset_model(void)
{
    g_ndev = 0;
    g_nrows = 0;
    g_state_path[0] = '\0';
    g_fail_after = -1;
    g_period_us = 0;
    g_sampling_calls = 0;
    g_failed = 0;
    memset(g_devs, 0, sizeof(g_devs));
    for (unsigned int i = 0; i < MAX_DEVICES; i++)
        g_handles[i].index = i;
}

static nvmlReturn_t load_script(void)
{
    reset_model();
    const char *path = getenv(SCRIPT_ENV);
    if (path == NULL || path[0] == '\0')
        return NVML_ERROR_DRIVER_NOT_LOADED;

    char *text = malloc(MAX_SCRIPT_BYTES + 1);
    if (text == NULL)
        return NVML_ERROR_MEMORY;
    ssize_t len = read_small_file(path, text, MAX_SCRIPT_BYTES + 1);
    if (len < 0) {
        warnmsg(path, 0, "cannot read script", strerror(errno));
        free(text);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if ((size_t)len == MAX_SCRIPT_BYTES) {
        warnmsg(path, 0, "script too large (limit 1 MiB)", NULL);
        free(text);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int rc = parse_script(path, text);
    free(text);
    if (rc != 0) {
        reset_model();
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Process discovery                                                         */
/* ------------------------------------------------------------------------ */

/* Fills g_scan_pid / g_scan_ppid from /proc/<pid>/stat.  Returns the count.
 * (The parent pid in /proc/<pid>/stat is the parent's process id, whichever
 * of its threads created the child.) */
static unsigned int scan_proc(void)
{
    unsigned int n = 0;
    DIR *d = opendir("/proc");
    if (d == NULL)
        return 0;
    struct dirent *de;
    char path[64];
    while ((de = readdir(d)) != NULL && n < MAX_PROC_SCAN) {
        unsigned int pid;
        if (parse_u32(de->d_name, &pid) != 0 || pid == 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%u/stat", pid);
        ssize_t len = read_small_file(path, g_iobuf, sizeof(g_iobuf));
        if (len <= 0)
            continue;
        /* "pid (comm) S ppid ..."; comm may contain anything, so look
         * for the last ')'. */
        char *rp = strrchr(g_iobuf, ')');
        if (rp == NULL)
            continue;
        unsigned int ppid;
        char state;
        if (sscanf(rp + 1, " %c %u", &state, &ppid) != 2)
            continue;
        g_scan_pid[n] = pid;
        g_scan_ppid[n] = ppid;
        n++;
    }
    closedir(d);
    return n;
}

static int cur_has_pid(unsigned int pid)
{
    for (unsigned int i = 0; i < g_cur.nprocs; i++)
        if (g_cur.procs[i].pid == pid)
            return 1;
    return 0;
}

static void cur_add(unsigned int pid, const struct proc_spec *ps)
{
    if (g_cur.nprocs >= MAX_EXPANDED || cur_has_pid(pid))
        return;
    struct expanded_proc *e = &g_cur.procs[g_cur.nprocs++];
    e->pid = pid;
    e->mem = ps->mem;
    e->sm = ps->sm;
}

/* Adds the children (depth 1) or all descendants of this process. */
static void add_related(const struct proc_spec *ps, int *scanned, unsigned int *nscan)
{
    if (!*scanned) {
        *nscan = scan_proc();
        *scanned = 1;
    }
    unsigned int self = (unsigned int)getpid();
    if (ps->kind == PID_CHILD) {
        for (unsigned int i = 0; i < *nscan; i++)
            if (g_scan_ppid[i] == self)
                cur_add(g_scan_pid[i], ps);
        return;
    }
    /* Breadth-first walk over the parent links; a small fixed queue keeps
     * this bounded. */
    unsigned int queue[MAX_EXPANDED];
    unsigned int head = 0, tail = 0;
    queue[tail++] = self;
    while (head < tail) {
        unsigned int parent = queue[head++];
        for (unsigned int i = 0; i < *nscan; i++) {
            if (g_scan_ppid[i] != parent || g_scan_pid[i] == self)
                continue;
            int seen = 0;
            for (unsigned int k = 0; k < tail; k++)
                if (queue[k] == g_scan_pid[i])
                    seen = 1;
            if (seen)
                continue;
            cur_add(g_scan_pid[i], ps);
            if (tail < MAX_EXPANDED)
                queue[tail++] = g_scan_pid[i];
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Current row                                                               */
/* ------------------------------------------------------------------------ */

/* Reads the first whitespace-separated word of the state file into out.
 * Returns 0 if a word was read. */
static int read_state_word(char *out, size_t cap)
{
    if (g_state_path[0] == '\0')
        return -1;
    ssize_t len = read_small_file(g_state_path, g_iobuf, sizeof(g_iobuf));
    if (len <= 0)
        return -1;
    char *p = g_iobuf;
    while (*p != '\0' && isspace((unsigned char)*p))
        p++;
    if (*p == '\0')
        return -1;
    size_t n = 0;
    while (p[n] != '\0' && !isspace((unsigned char)p[n]))
        n++;
    if (n >= cap)
        return -1; /* longer than any state key can be: cannot match */
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

/* Fills g_cur for device dev from the row that is current now. */
static void compute_current(unsigned int dev)
{
    g_cur.util = 0;
    g_cur.mem_used = 0;
    g_cur.nprocs = 0;

    const struct row *sel = NULL;
    char word[MAX_WORD];
    int state_active = 0;

    if (read_state_word(word, sizeof(word)) == 0) {
        for (unsigned int i = 0; i < g_nrows; i++) {
            if (g_rows[i].kind == KEY_STATE && strcmp(g_rows[i].state, word) == 0) {
                state_active = 1;
                if (g_rows[i].dev == dev)
                    sel = &g_rows[i];
            }
        }
    }
    if (!state_active) {
        double now = elapsed_seconds();
        for (unsigned int i = 0; i < g_nrows; i++) {
            const struct row *r = &g_rows[i];
            if (r->kind != KEY_TIME || r->dev != dev || r->t > now)
                continue;
            if (sel == NULL || r->t > sel->t)
                sel = r;
        }
    }
    if (sel == NULL)
        return;

    g_cur.util = sel->util;
    g_cur.mem_used = sel->mem_used;
    int scanned = 0;
    unsigned int nscan = 0;
    for (unsigned int i = 0; i < sel->nprocs; i++) {
        const struct proc_spec *ps = &sel->procs[i];
        if (ps->kind == PID_FIXED)
            cur_add(ps->pid, ps);
        else
            add_related(ps, &scanned, &nscan);
    }
}

/* ------------------------------------------------------------------------ */
/* Common entry checks                                                       */
/* ------------------------------------------------------------------------ */

static int valid_device(nvmlDevice_t device)
{
    for (unsigned int i = 0; i < g_ndev; i++)
        if (device == &g_handles[i])
            return 1;
    return 0;
}

/* Checks for every call except init, shutdown and nvmlErrorString. */
static nvmlReturn_t check_ready(void)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (g_failed)
        return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

/* Checks for sampling calls; counts them towards fail_after. */
static nvmlReturn_t begin_sampling(nvmlDevice_t device)
{
    nvmlReturn_t rc = check_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (g_fail_after >= 0 && g_sampling_calls >= (unsigned long long)g_fail_after) {
        g_failed = 1;
        return NVML_ERROR_UNKNOWN;
    }
    g_sampling_calls++;
    if (!valid_device(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    compute_current(device->index);
    return NVML_SUCCESS;
}

#define LOCK() pthread_mutex_lock(&g_lock)
#define UNLOCK_RETURN(rc)                \
    do {                                 \
        nvmlReturn_t rc_ = (rc);         \
        pthread_mutex_unlock(&g_lock);   \
        return rc_;                      \
    } while (0)

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src)
{
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(src);
    if ((size_t)length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Exported API                                                              */
/* ------------------------------------------------------------------------ */

nvmlReturn_t nvmlInit_v2(void)
{
    LOCK();
    if (g_refcount > 0) {
        g_refcount++;
        UNLOCK_RETURN(NVML_SUCCESS);
    }
    nvmlReturn_t rc = load_script();
    if (rc == NVML_SUCCESS) {
        clock_gettime(CLOCK_MONOTONIC, &g_t0);
        g_refcount = 1;
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return nvmlInit_v2();
}

nvmlReturn_t nvmlInit(void)
{
    return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void)
{
    LOCK();
    if (g_refcount == 0)
        UNLOCK_RETURN(NVML_ERROR_UNINITIALIZED);
    g_refcount--;
    if (g_refcount == 0)
        reset_model();
    UNLOCK_RETURN(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    LOCK();
    nvmlReturn_t rc = check_ready();
    if (rc == NVML_SUCCESS)
        rc = copy_string(version, length, "999.99.99");
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    LOCK();
    nvmlReturn_t rc = check_ready();
    if (rc == NVML_SUCCESS)
        rc = copy_string(version, length, "12.999.99.99");
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    LOCK();
    nvmlReturn_t rc = check_ready();
    if (rc == NVML_SUCCESS) {
        if (deviceCount == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *deviceCount = g_ndev;
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    LOCK();
    nvmlReturn_t rc = check_ready();
    if (rc == NVML_SUCCESS) {
        if (device == NULL || index >= g_ndev)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *device = &g_handles[index];
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    LOCK();
    nvmlReturn_t rc = check_ready();
    if (rc == NVML_SUCCESS) {
        if (!valid_device(device) || index == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *index = device->index;
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    LOCK();
    nvmlReturn_t rc = check_ready();
    if (rc == NVML_SUCCESS) {
        if (!valid_device(device))
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            rc = copy_string(name, length, g_devs[device->index].name);
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    LOCK();
    nvmlReturn_t rc = check_ready();
    if (rc == NVML_SUCCESS) {
        if (!valid_device(device)) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
            snprintf(buf, sizeof(buf), "GPU-fa4e0000-0000-4000-8000-%012x", device->index);
            rc = copy_string(uuid, length, buf);
        }
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    LOCK();
    nvmlReturn_t rc = begin_sampling(device);
    if (rc == NVML_SUCCESS) {
        if (memory == NULL) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            unsigned long long total = g_devs[device->index].total;
            memory->total = total;
            memory->used = g_cur.mem_used;
            memory->free = g_cur.mem_used < total ? total - g_cur.mem_used : 0;
        }
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    LOCK();
    nvmlReturn_t rc = begin_sampling(device);
    if (rc == NVML_SUCCESS) {
        if (memory == NULL) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else if (memory->version != nvmlMemory_v2) {
            rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        } else {
            unsigned long long total = g_devs[device->index].total;
            memory->total = total;
            memory->reserved = 0;
            memory->used = g_cur.mem_used;
            memory->free = g_cur.mem_used < total ? total - g_cur.mem_used : 0;
        }
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    LOCK();
    nvmlReturn_t rc = begin_sampling(device);
    if (rc == NVML_SUCCESS) {
        if (utilization == NULL) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            utilization->gpu = g_cur.util;
            utilization->memory = g_cur.util;
        }
    }
    UNLOCK_RETURN(rc);
}

/* Shared part of the running-process queries: size negotiation as nvml.h
 * describes it.  Returns SUCCESS when the caller should fill n entries. */
static nvmlReturn_t negotiate_count(unsigned int *infoCount, const void *infos, unsigned int n)
{
    if (infoCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (*infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && infos == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    LOCK();
    nvmlReturn_t rc = begin_sampling(device);
    if (rc == NVML_SUCCESS)
        rc = negotiate_count(infoCount, infos, g_cur.nprocs);
    if (rc == NVML_SUCCESS) {
        for (unsigned int i = 0; i < g_cur.nprocs; i++) {
            memset(&infos[i], 0, sizeof(infos[i]));
            infos[i].pid = g_cur.procs[i].pid;
            infos[i].usedGpuMemory = g_cur.procs[i].mem;
            infos[i].gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_U32;
            infos[i].computeInstanceId = NVML_VALUE_NOT_AVAILABLE_U32;
        }
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    /* Same layout as nvmlProcessInfo_t. */
    return nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    LOCK();
    nvmlReturn_t rc = begin_sampling(device);
    if (rc == NVML_SUCCESS)
        rc = negotiate_count(infoCount, infos, g_cur.nprocs);
    if (rc == NVML_SUCCESS) {
        for (unsigned int i = 0; i < g_cur.nprocs; i++) {
            memset(&infos[i], 0, sizeof(infos[i]));
            infos[i].pid = g_cur.procs[i].pid;
            infos[i].usedGpuMemory = g_cur.procs[i].mem;
        }
    }
    UNLOCK_RETURN(rc);
}

/* Graphics and MPS process lists are always empty.  These are not
 * sampling calls (they do not count towards fail_after). */
static nvmlReturn_t empty_process_list(nvmlDevice_t device, unsigned int *infoCount)
{
    LOCK();
    nvmlReturn_t rc = check_ready();
    if (rc == NVML_SUCCESS) {
        if (!valid_device(device) || infoCount == NULL)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *infoCount = 0;
    }
    UNLOCK_RETURN(rc);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    (void)infos;
    return empty_process_list(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos)
{
    (void)infos;
    return empty_process_list(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos)
{
    (void)infos;
    return empty_process_list(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                        unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos)
{
    (void)infos;
    return empty_process_list(device, infoCount);
}

/*
 * Per-process utilisation.  Real NVML answers a call with utilization ==
 * NULL by setting *processSamplesCount and returning INSUFFICIENT_SIZE
 * (nvml-wrapper relies on this), and returns NOT_FOUND when there is no
 * sample newer than lastSeenTimeStamp.  Each call here produces one sample
 * per process of the current row, stamped with a fresh timestamp.
 */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp)
{
    LOCK();
    nvmlReturn_t rc = begin_sampling(device);
    if (rc != NVML_SUCCESS)
        UNLOCK_RETURN(rc);
    if (processSamplesCount == NULL)
        UNLOCK_RETURN(NVML_ERROR_INVALID_ARGUMENT);

    unsigned long long now = next_stamp_us();
    unsigned int n = g_cur.nprocs;
    if (g_period_us > 0) {
        /* Like a real driver: samples taken once per period, and only processes that used
         * the GPU (non-zero SM utilisation) reported. */
        now -= now % g_period_us;
        n = 0;
        for (unsigned int i = 0; i < g_cur.nprocs; i++)
            n += g_cur.procs[i].sm > 0;
    }
    if (n == 0 || now <= lastSeenTimeStamp)
        UNLOCK_RETURN(NVML_ERROR_NOT_FOUND);
    if (utilization == NULL || *processSamplesCount < n) {
        *processSamplesCount = n;
        UNLOCK_RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned int k = 0;
    for (unsigned int i = 0; i < g_cur.nprocs && k < n; i++) {
        if (g_period_us > 0 && g_cur.procs[i].sm == 0)
            continue;
        memset(&utilization[k], 0, sizeof(utilization[k]));
        utilization[k].pid = g_cur.procs[i].pid;
        utilization[k].timeStamp = now;
        utilization[k].smUtil = g_cur.procs[i].sm;
        utilization[k].memUtil = g_cur.procs[i].sm / 2;
        utilization[k].encUtil = 0;
        utilization[k].decUtil = 0;
        k++;
    }
    *processSamplesCount = k;
    UNLOCK_RETURN(NVML_SUCCESS);
}
