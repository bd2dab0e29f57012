//! sbatch command lines, `#SBATCH` blocks and array specs. The input is split on NUL
//! bytes into argv tokens (NUL cannot occur inside a real argv token); the whole input,
//! as text, is also read as a batch script and its first line as an `--array` spec.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slurm_supervisor::domain::sbatch_args::{
    self, check_overrides, format_array_list, parse, parse_array_spec, rebuild, script_directives,
    Overrides, MAX_ARRAY_INDEX, MAX_ARRAY_TASKS,
};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let argv: Vec<String> = text.split('\0').map(str::to_string).collect();

    if let Ok(cmd) = parse(&argv) {
        let overrides = [
            Overrides::default(),
            Overrides {
                mem_mb: Some(400),
                time_limit: Some("00:02:00".into()),
                exclude: vec!["n1".into()],
                array: Some("3,5".into()),
                partition: Some("long".into()),
                comment: Some("ssv-0a1b2c3d-L2-c1.2".into()),
                script_path: Some("/state/scripts/L2/job.sh".into()),
            },
        ];
        for o in &overrides {
            let out = rebuild(&cmd, o);
            if check_overrides(&cmd, o).is_ok() {
                // The rebuilt line reads back with the same script and arguments.
                let again = parse(&out).expect("a checked rebuild parses");
                assert_eq!(again.script_args, cmd.script_args);
                let script = o.script_path.as_ref().or(cmd.script.as_ref());
                assert_eq!(again.script.as_ref(), script);
                assert_eq!(
                    again
                        .options
                        .iter()
                        .filter(|x| x.name == "parsable")
                        .count(),
                    1
                );
            }
        }
    }

    let tokens = script_directives(&text);
    let _ = sbatch_args::parse_directives(&tokens);
    let _ = sbatch_args::try_script_directives(&text);
    let _ = sbatch_args::Submitted::read(&argv, Some(data));

    let spec = text.lines().next().unwrap_or("");
    let _ = sbatch_args::array_throttle(spec);
    if let Ok(tasks) = parse_array_spec(spec) {
        assert!(!tasks.is_empty() && tasks.len() <= MAX_ARRAY_TASKS);
        assert!(tasks.windows(2).all(|w| w[0] < w[1]));
        assert!(tasks.iter().all(|&t| t <= MAX_ARRAY_INDEX));
        assert_eq!(
            parse_array_spec(&format_array_list(&tasks)).ok(),
            Some(tasks)
        );
    }
});
