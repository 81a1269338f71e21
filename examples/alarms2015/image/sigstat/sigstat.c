/*
 * sigstat: per-signal statistics of a WFDB record, in physical units.
 *
 * Written for vmjudge's alarms2015 example challenge, whose guest image builds it from this
 * source (image/build.sh), as PhysioNet's environment gave entries the WFDB tools. Plain C99,
 * libc and libm only. Records are the challenge's own, but an entry may hand it anything, so
 * every header field is checked and every read bounded.
 *
 *     sigstat RECORD      reads RECORD.hea and the signal file it names
 *
 * Headers: a subset of WFDB's. First line "RECORD NSIG FS NSAMP" (FS may carry "/counter" or
 * "(base)" parts, which are ignored; fields after NSAMP are ignored); then NSIG signal lines
 * "FILE FORMAT GAIN ADCRES ADCZERO INITVAL CHECKSUM BLOCKSIZE DESCRIPTION", where every field
 * after FORMAT may be left out from the right, GAIN may be "200", "200(BASELINE)", "200/mV" or
 * "200(BASELINE)/mV" (no units: mV; gain 0: 200; no baseline: ADCZERO), and the description
 * is the rest of the line. FORMAT is 16 (interleaved little-endian 16-bit samples), or "16+N"
 * when the samples start N bytes into the file; every signal is in the same file, next to the
 * header. Lines starting with '#' are comments: the first one is the alarm's type.
 *
 * Output (stable: entries parse it), one line each, fields separated by one space:
 *     record NAME signals NSIG fs FS samples NSAMP seconds NSAMP/FS
 *     alarm TYPE
 *     signal INDEX NAME units UNITS samples N invalid N mean X sd X min X max X peaks N flat X
 * Names, types and units are single tokens: bytes other than printable non-space ASCII become
 * '_'; a missing one is "-". Numbers are printed with "%.6g".
 *   samples  the signal's samples; invalid: those holding WFDB's "no value" (-32768), which the
 *            statistics below leave out (a run for flat does not cross one).
 *   mean, sd the mean and the standard deviation (population: divided by n) of the values,
 *            (sample - baseline) / gain; min and max, the extremes. "-" when no sample is valid.
 *   peaks    how many times the signal rises above mean + (max - mean) / 2 after having been at
 *            or below the mean since the last peak counted (a record that starts above that
 *            level does not count its first peak): beats of a pulse or QRS complexes of an ECG
 *            whose R waves are its tallest deflections.
 *   flat     the longest stretch, in seconds (samples / FS), over which the signal stays
 *            within a band 5 % as wide as its whole range (max - min): a flat line, a lead off.
 *
 * Exit status: 0, or 2 with one line "sigstat: ..." on stderr (bad arguments, a malformed
 * header, a missing or short signal file). A checksum that does not match the samples is
 * reported on stderr as a warning, as WFDB's tools do, and does not change the status.
 */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE 4096    /* bytes of one header line, newline included */
#define MAX_SIGNALS 256
#define MAX_TOKEN 64     /* bytes kept of a name, units or alarm type */
#define MAX_PATH 4096
#define INVALID_SAMPLE (-32768)
#define FLAT_SHARE 20    /* flat band: 1/20 of the range */

struct signal {
    char name[MAX_TOKEN + 1];
    char units[MAX_TOKEN + 1];
    double gain;
    long long baseline;
    int has_baseline;
    long long adczero;
    int has_checksum;
    long long checksum;
};

struct header {
    char record[MAX_TOKEN + 1];
    char alarm[MAX_TOKEN + 1];
    int nsig;
    double fs;
    long long nsamp;
    char file[MAX_PATH];
    long long offset;    /* bytes before the first sample */
    struct signal sig[MAX_SIGNALS];
};

static const char *header_path;

/* One line on stderr. It may quote the header, so bytes that are not printable ASCII are
 * shown as '?' (no terminal escapes, no line breaks) and a long line is cut. */
static void report(const char *prefix, const char *fmt, va_list ap)
{
    char msg[512];
    size_t i;
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    if (n < 0)
        strcpy(msg, "(cannot format the message)");
    else if ((size_t)n >= sizeof msg)
        strcpy(msg + sizeof msg - 4, "...");
    for (i = 0; msg[i] != '\0'; i++)
        if ((unsigned char)msg[i] < 0x20 || (unsigned char)msg[i] >= 0x7f)
            msg[i] = '?';
    fprintf(stderr, "sigstat: %s%s\n", prefix, msg);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report("", fmt, ap);
    va_end(ap);
    exit(2);
}

static void warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report("warning: ", fmt, ap);
    va_end(ap);
}

static void usage(FILE *out)
{
    fputs("usage: sigstat RECORD\n"
          "Reads RECORD.hea and its format-16 signal file; prints one line \"record ...\", one line\n"
          "\"alarm TYPE\" (the header's first comment) and per signal one line \"signal INDEX NAME\n"
          "units U samples N invalid N mean X sd X min X max X peaks N flat SECONDS\" (physical\n"
          "units; see the top of sigstat.c). Exit status 2 on any error.\n", out);
}

/* A single printable token: other bytes become '_', at most MAX_TOKEN bytes, "-" if empty. */
static void copy_token(char *dst, const char *src, size_t len)
{
    size_t i;
    if (len > MAX_TOKEN)
        len = MAX_TOKEN;
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = (c > 0x20 && c < 0x7f) ? (char)c : '_';
    }
    dst[len] = '\0';
    if (len == 0)
        strcpy(dst, "-");
}

/* Reads one line without its end ("\n" or "\r\n"); returns 0 at the end of the file. */
static int read_line(FILE *f, char *buf, long lineno)
{
    size_t len = 0;
    int c;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == '\0')
            die("%s: line %ld holds a NUL byte: not a header", header_path, lineno);
        if (len + 1 >= MAX_LINE)
            die("%s: line %ld is longer than %d bytes", header_path, lineno, MAX_LINE - 1);
        buf[len++] = (char)c;
    }
    if (ferror(f))
        die("%s: cannot read: %s", header_path, strerror(errno));
    if (c == EOF && len == 0)
        return 0;
    if (len > 0 && buf[len - 1] == '\r')
        len--;
    buf[len] = '\0';
    return 1;
}

/* The next whitespace-separated token of *p (NUL-terminated in place), or NULL. */
static char *next_token(char **p)
{
    char *s = *p, *start;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '\0') {
        *p = s;
        return NULL;
    }
    start = s;
    while (*s != '\0' && *s != ' ' && *s != '\t')
        s++;
    if (*s != '\0')
        *s++ = '\0';
    *p = s;
    return start;
}

/* A whole decimal integer in [lo, hi]; *end (if given) gets the first byte after it instead of
 * requiring the token to end there. */
static long long parse_int(const char *tok, const char **end, long long lo, long long hi,
                           long lineno, const char *what)
{
    char *stop;
    long long v;
    errno = 0;
    v = strtoll(tok, &stop, 10);
    if (stop == tok || errno != 0 || v < lo || v > hi || (end == NULL && *stop != '\0'))
        die("%s: line %ld: %s \"%s\" is not a whole number from %lld to %lld",
            header_path, lineno, what, tok, lo, hi);
    if (end != NULL)
        *end = stop;
    return v;
}

/* A finite number >= 0 at the start of tok; *end gets the first byte after it. */
static double parse_number(const char *tok, const char **end, long lineno, const char *what)
{
    char *stop;
    double v;
    errno = 0;
    v = strtod(tok, &stop);
    if (stop == tok || errno != 0 || !isfinite(v) || v < 0)
        die("%s: line %ld: %s \"%s\" is not a number of at least 0", header_path, lineno, what, tok);
    *end = stop;
    return v;
}

static void parse_record_line(struct header *h, char *line, long lineno)
{
    char *p = line, *name, *tok;
    const char *end;
    name = next_token(&p);
    if (name == NULL)
        die("%s: line %ld: no record name", header_path, lineno);
    if (strchr(name, '/') != NULL)
        die("%s: line %ld: \"%s\" is a multi-segment record, which sigstat does not read",
            header_path, lineno, name);
    copy_token(h->record, name, strlen(name));
    tok = next_token(&p);
    if (tok == NULL)
        die("%s: line %ld: no number of signals after the record name", header_path, lineno);
    h->nsig = (int)parse_int(tok, NULL, 1, MAX_SIGNALS, lineno, "the number of signals");
    tok = next_token(&p);
    if (tok == NULL)
        die("%s: line %ld: no sampling frequency after the number of signals", header_path, lineno);
    h->fs = parse_number(tok, &end, lineno, "the sampling frequency");
    if (h->fs <= 0 || (*end != '\0' && *end != '/' && *end != '('))
        die("%s: line %ld: the sampling frequency \"%s\" is not a positive number", header_path,
            lineno, tok);
    tok = next_token(&p);
    if (tok == NULL)
        die("%s: line %ld: no number of samples after the sampling frequency (sigstat needs it)",
            header_path, lineno);
    h->nsamp = parse_int(tok, NULL, 1, LLONG_MAX, lineno, "the number of samples");
}

/* "16" or "16+OFFSET". */
static long long parse_format(const char *tok, long lineno)
{
    const char *end;
    long long fmt = parse_int(tok, &end, 0, 1000000, lineno, "the signal format");
    long long offset = 0;
    if (*end == '+')
        offset = parse_int(end + 1, NULL, 0, LLONG_MAX / 2, lineno, "the byte offset");
    else if (*end != '\0')
        die("%s: line %ld: format \"%s\": sigstat reads format 16 or 16+OFFSET only", header_path,
            lineno, tok);
    if (fmt != 16)
        die("%s: line %ld: format \"%s\": sigstat reads format 16 only", header_path, lineno, tok);
    return offset;
}

/* "GAIN", "GAIN(BASELINE)", "GAIN/UNITS" or "GAIN(BASELINE)/UNITS". */
static void parse_gain(struct signal *s, const char *tok, long lineno)
{
    const char *end;
    s->gain = parse_number(tok, &end, lineno, "the gain");
    if (s->gain == 0)
        s->gain = 200;  /* WFDB's default */
    if (*end == '(') {
        s->baseline = parse_int(end + 1, &end, -2147483648LL, 2147483647LL, lineno, "the baseline");
        if (*end != ')')
            die("%s: line %ld: gain \"%s\": the baseline needs a closing ')'", header_path, lineno, tok);
        s->has_baseline = 1;
        end++;
    }
    if (*end == '/') {
        if (end[1] == '\0')
            die("%s: line %ld: gain \"%s\": no units after '/'", header_path, lineno, tok);
        copy_token(s->units, end + 1, strlen(end + 1));
    } else if (*end != '\0') {
        die("%s: line %ld: gain \"%s\" is not GAIN, GAIN(BASELINE), GAIN/UNITS or GAIN(BASELINE)/UNITS",
            header_path, lineno, tok);
    }
}

static void parse_signal_line(struct header *h, int index, char *line, long lineno)
{
    struct signal *s = &h->sig[index];
    char *p = line, *tok, *desc;
    size_t len;
    long long offset;

    strcpy(s->units, "mV");
    s->gain = 200;
    tok = next_token(&p);  /* the line is not blank, so there is one */
    if (strchr(tok, '/') != NULL || strcmp(tok, "-") == 0)
        die("%s: line %ld: signal file \"%s\": sigstat reads a file beside the header only",
            header_path, lineno, tok);
    if (strlen(tok) >= sizeof h->file)
        die("%s: line %ld: the signal file name is too long", header_path, lineno);
    if (index == 0)
        strcpy(h->file, tok);
    else if (strcmp(h->file, tok) != 0)
        die("%s: line %ld: signal %d is in \"%s\", not \"%s\": sigstat reads records with every "
            "signal in one file", header_path, lineno, index, tok, h->file);
    tok = next_token(&p);
    if (tok == NULL)
        die("%s: line %ld: no format after the signal file name", header_path, lineno);
    offset = parse_format(tok, lineno);
    if (index == 0)
        h->offset = offset;
    else if (offset != h->offset)
        die("%s: line %ld: signal %d starts at byte %lld of the file, signal 0 at byte %lld",
            header_path, lineno, index, offset, h->offset);
    if ((tok = next_token(&p)) != NULL)
        parse_gain(s, tok, lineno);
    if ((tok = next_token(&p)) != NULL)
        parse_int(tok, NULL, 0, 64, lineno, "the ADC resolution");
    if ((tok = next_token(&p)) != NULL)
        s->adczero = parse_int(tok, NULL, -2147483648LL, 2147483647LL, lineno, "the ADC zero");
    if (!s->has_baseline)
        s->baseline = s->adczero;
    if ((tok = next_token(&p)) != NULL)
        parse_int(tok, NULL, -2147483648LL, 2147483647LL, lineno, "the initial value");
    if ((tok = next_token(&p)) != NULL) {
        s->checksum = parse_int(tok, NULL, -2147483648LL, 2147483647LL, lineno, "the checksum");
        s->has_checksum = 1;
    }
    if ((tok = next_token(&p)) != NULL)
        parse_int(tok, NULL, 0, 2147483647LL, lineno, "the block size");
    desc = p;
    while (*desc == ' ' || *desc == '\t')
        desc++;
    len = strlen(desc);
    while (len > 0 && (desc[len - 1] == ' ' || desc[len - 1] == '\t'))
        len--;
    copy_token(s->name, desc, len);
}

static void read_header(struct header *h, FILE *f)
{
    char line[MAX_LINE];
    long lineno = 0;
    int signals = 0, have_record = 0;
    strcpy(h->alarm, "-");
    while (read_line(f, line, ++lineno)) {
        char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '#') {
            if (strcmp(h->alarm, "-") == 0) {
                size_t len;
                s++;
                while (*s == ' ' || *s == '\t')
                    s++;
                len = strlen(s);
                while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
                    len--;
                copy_token(h->alarm, s, len);
            }
        } else if (*s == '\0') {
            continue;
        } else if (!have_record) {
            parse_record_line(h, s, lineno);
            have_record = 1;
        } else if (signals < h->nsig) {
            parse_signal_line(h, signals++, s, lineno);
        } else {
            die("%s: line %ld: a line after the %d signal line(s) that is not a comment",
                header_path, lineno, h->nsig);
        }
    }
    if (!have_record)
        die("%s: no record line: not a WFDB header", header_path);
    if (signals < h->nsig)
        die("%s: %d signal line(s), but the first line announces %d", header_path, signals, h->nsig);
}

static int sample(const unsigned char *data, int nsig, int s, long long i)
{
    const unsigned char *b = data + 2 * ((size_t)i * (size_t)nsig + (size_t)s);
    int v = b[0] | (b[1] << 8);
    return v >= 32768 ? v - 65536 : v;
}

/* Reads the samples; dies if the file is missing or shorter than the header says. */
static unsigned char *read_samples(const struct header *h, const char *path)
{
    FILE *f = fopen(path, "rb");
    long size;
    long long needed;
    unsigned char *data;
    if (f == NULL)
        die("%s: cannot open: %s", path, strerror(errno));
    if (h->nsamp > (LLONG_MAX - h->offset) / 2 / h->nsig)
        die("%s: %lld samples of %d signals is more than sigstat can hold", header_path, h->nsamp, h->nsig);
    needed = 2 * h->nsamp * h->nsig;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0)
        die("%s: cannot find its size: %s", path, strerror(errno));
    if ((long long)size < h->offset + needed)
        die("%s: %ld bytes, short of the %lld the header needs (%lld samples of %d signals of 2 bytes "
            "from byte %lld)", path, size, h->offset + needed, h->nsamp, h->nsig, h->offset);
    if ((unsigned long long)needed > SIZE_MAX || (data = malloc((size_t)needed)) == NULL)
        die("%s: not enough memory for %lld bytes of samples", path, needed);
    if (fseek(f, (long)h->offset, SEEK_SET) != 0 || fread(data, 1, (size_t)needed, f) != (size_t)needed)
        die("%s: cannot read %lld bytes from byte %lld", path, needed, h->offset);
    fclose(f);
    return data;
}

/* "%.6g", with "-" for a value that does not exist and no "-0". */
static void print_value(const char *key, int defined, double v)
{
    if (defined)
        printf(" %s %.6g", key, v + 0.0);
    else
        printf(" %s -", key);
}

/* The longest run of valid samples whose range is at most range/FLAT_SHARE (two monotonic queues). */
static long long longest_flat(const unsigned char *data, const struct header *h, int s, long long range,
                              long long *qmax, long long *qmin)
{
    long long best = 0, left = 0, r;
    long long hmax = 0, tmax = 0, hmin = 0, tmin = 0;  /* queue heads and tails */
    for (r = 0; r < h->nsamp; r++) {
        int x = sample(data, h->nsig, s, r);
        if (x == INVALID_SAMPLE) {
            hmax = tmax = hmin = tmin = 0;
            left = r + 1;
            continue;
        }
        while (tmax > hmax && sample(data, h->nsig, s, qmax[tmax - 1]) <= x)
            tmax--;
        qmax[tmax++] = r;
        while (tmin > hmin && sample(data, h->nsig, s, qmin[tmin - 1]) >= x)
            tmin--;
        qmin[tmin++] = r;
        while ((long long)(sample(data, h->nsig, s, qmax[hmax]) - sample(data, h->nsig, s, qmin[hmin]))
               * FLAT_SHARE > range) {
            left++;
            if (qmax[hmax] < left)
                hmax++;
            if (qmin[hmin] < left)
                hmin++;
        }
        if (r - left + 1 > best)
            best = r - left + 1;
    }
    return best;
}

static void print_signal(const unsigned char *data, const struct header *h, int s, long long *qmax,
                         long long *qmin)
{
    const struct signal *sig = &h->sig[s];
    long long i, valid = 0, sum = 0, peaks = 0, flat = 0;
    unsigned long long checksum = 0;
    int lo = 32767, hi = -32768, armed = -1;
    double mean = 0, ss = 0, level;

    for (i = 0; i < h->nsamp; i++) {
        int x = sample(data, h->nsig, s, i);
        checksum += (unsigned long long)(long long)x;
        if (x == INVALID_SAMPLE)
            continue;
        valid++;
        sum += x;
        if (x < lo)
            lo = x;
        if (x > hi)
            hi = x;
    }
    if (sig->has_checksum && (checksum & 0xffff) != ((unsigned long long)sig->checksum & 0xffff))
        warn("%s: signal %d (%s): the samples do not match the header's checksum %lld", header_path, s,
             sig->name, sig->checksum);
    if (valid > 0) {
        mean = (double)sum / (double)valid;
        level = mean + (hi - mean) / 2;
        for (i = 0; i < h->nsamp; i++) {
            int x = sample(data, h->nsig, s, i);
            if (x == INVALID_SAMPLE)
                continue;
            ss += (x - mean) * (x - mean);
            if (armed < 0)
                armed = !(x > level);
            else if (armed && x > level) {
                peaks++;
                armed = 0;
            } else if (!armed && x <= mean) {
                armed = 1;
            }
        }
        flat = longest_flat(data, h, s, (long long)hi - lo, qmax, qmin);
    }
    printf("signal %d %s units %s samples %lld invalid %lld", s, sig->name, sig->units, h->nsamp,
           h->nsamp - valid);
    print_value("mean", valid > 0, (mean - (double)sig->baseline) / sig->gain);
    print_value("sd", valid > 0, sqrt(ss / (valid > 0 ? (double)valid : 1.0)) / sig->gain);
    print_value("min", valid > 0, ((double)lo - (double)sig->baseline) / sig->gain);
    print_value("max", valid > 0, ((double)hi - (double)sig->baseline) / sig->gain);
    printf(" peaks %lld", peaks);
    print_value("flat", 1, (double)flat / h->fs);
    putchar('\n');
}

int main(int argc, char **argv)
{
    static struct header h;  /* large: not on the stack */
    static char hea[MAX_PATH], dat[MAX_PATH];
    const char *record, *slash;
    size_t len, dirlen;
    unsigned char *data;
    long long *qmax, *qmin;
    FILE *f;
    int s;

    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '\0' || argv[1][0] == '-') {
        usage(stderr);
        return 2;
    }
    record = argv[1];
    len = strlen(record);
    if (len >= 4 && strcmp(record + len - 4, ".hea") == 0)
        len -= 4;  /* "a101l.hea" names the record a101l */
    if (len + 5 > sizeof hea)
        die("record name too long");
    memcpy(hea, record, len);
    strcpy(hea + len, ".hea");
    header_path = hea;

    f = fopen(hea, "r");
    if (f == NULL)
        die("%s: cannot open: %s", hea, strerror(errno));
    read_header(&h, f);
    fclose(f);

    slash = strrchr(hea, '/');
    dirlen = slash == NULL ? 0 : (size_t)(slash - hea) + 1;
    if (dirlen + strlen(h.file) + 1 > sizeof dat)
        die("%s: the signal file's path is too long", hea);
    memcpy(dat, hea, dirlen);
    strcpy(dat + dirlen, h.file);
    data = read_samples(&h, dat);

    if ((unsigned long long)h.nsamp > SIZE_MAX / sizeof *qmax)
        die("not enough memory for %lld samples", h.nsamp);
    qmax = malloc((size_t)h.nsamp * sizeof *qmax);
    qmin = malloc((size_t)h.nsamp * sizeof *qmin);
    if (qmax == NULL || qmin == NULL)
        die("not enough memory for %lld samples", h.nsamp);
    printf("record %s signals %d fs %.6g samples %lld seconds %.6g\n", h.record, h.nsig, h.fs, h.nsamp,
           (double)h.nsamp / h.fs);
    printf("alarm %s\n", h.alarm);
    for (s = 0; s < h.nsig; s++)
        print_signal(data, &h, s, qmax, qmin);
    free(qmin);
    free(qmax);
    free(data);
    if (fflush(stdout) != 0 || ferror(stdout))
        die("cannot write the output: %s", strerror(errno));
    return 0;
}
