# alarms2015 sample entry: is the alarm true (1) or false (0)?
#
#     sigstat RECORD | perl classify.pl RECORD    appends "RECORD,1" or "RECORD,0" to answers.txt
#
# Reads sigstat's output (its format is at the top of the challenge's image/sigstat/sigstat.c).
# The alarm is judged by the pulse (the ABP or PLETH signal), which the ECG's artefacts (a lead
# off, spikes, motion) leave alone. There is no pulse when it has a flat line of at least
# 3 s or hardly varies (sd under 5 % of its mean); its rate is its peaks a minute.
#   Asystole, Ventricular_Flutter_Fib: true when there is no pulse;
#   Bradycardia: no pulse, or a rate under 45; Tachycardia: no pulse, or over 130;
#   Ventricular_Tachycardia: no pulse, or over 100.
# Without a usable pulse signal, or for an alarm type it does not know, it keeps the alarm:
# suppressing a true alarm costs five times as much as keeping a false one.
# Core Perl only (the guest has perl-base).
use strict;
use warnings;

my $FLAT = 3;       # seconds
my $STILL = 0.05;   # sd / |mean|
my %RATE_SAYS_TRUE = (Bradycardia => sub { $_[0] < 45 }, Tachycardia => sub { $_[0] > 130 },
                      Ventricular_Tachycardia => sub { $_[0] > 100 });   # beats a minute
my %NO_PULSE_ONLY = (Asystole => 1, Ventricular_Flutter_Fib => 1);

die "usage: sigstat RECORD | perl classify.pl RECORD\n" unless @ARGV == 1;
my $record = $ARGV[0];
my ($seconds, $alarm, %signal);
while (my $line = <STDIN>) {
    my ($tag, @f) = split ' ', $line;
    next unless defined $tag;
    if ($tag eq 'record') {
        my %kv = @f[1 .. $#f];
        $seconds = $kv{seconds};
    } elsif ($tag eq 'alarm') {
        $alarm = $f[0];
    } elsif ($tag eq 'signal') {
        my %kv = @f[2 .. $#f];
        $signal{$f[1]} //= \%kv;
    }
}
die "classify.pl: no record or alarm line from sigstat\n" unless defined $seconds && defined $alarm;

sub number { my ($v) = @_; return defined $v && $v =~ /^-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i; }

my $true = 1;
my ($pulse) = grep { defined } @signal{qw(ABP PLETH)};
if ($pulse && number($seconds) && $seconds > 0 && !grep { !number($pulse->{$_}) } qw(mean sd peaks flat)) {
    my $none = $pulse->{flat} >= $FLAT || $pulse->{sd} < $STILL * abs($pulse->{mean});
    my $rate = $pulse->{peaks} * 60 / $seconds;
    if ($NO_PULSE_ONLY{$alarm}) {
        $true = $none;
    } elsif (my $says_true = $RATE_SAYS_TRUE{$alarm}) {
        $true = $none || $says_true->($rate);
    }
}
open(my $out, '>>', 'answers.txt') or die "classify.pl: answers.txt: $!\n";
print $out "$record,", ($true ? 1 : 0), "\n";
close($out) or die "classify.pl: answers.txt: $!\n";
